"""The life of one media-WebSocket connection, whatever the vendor protocol: receive
loop, flood guard, the call it starts, and how it ends.

A protocol subclass parses messages (``on_text`` / ``on_bytes``) and raises
:class:`SessionError` for anything wrong; this class counts it, lets the protocol say
goodbye its own way (``on_fail``: AudioHook sends ``disconnect``), closes the socket with
the error's code and ends the call. A watcher closes connections that never start a
call, and connections whose call the bridge ended by itself (drain, RTP timeout).
Everything runs on the bridge's loop, which owns the call controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from fastapi import WebSocket

from sip_bridge.adapters.ws_common import AdapterStats, CloseCode, FloodGuard, SessionError, close
from sip_bridge.calls import Call, CallController, CallSetup, PushedLegSpec
from sip_bridge.media import CapacityError, PushedLeg
from sip_bridge.settings import Settings

log = logging.getLogger(__name__)
WATCH_S = 0.25


class MediaSocketSession:
    """One vendor connection = at most one call. Subclasses implement the protocol."""

    def __init__(
        self,
        websocket: WebSocket,
        controller: CallController,
        settings: Settings,
        stats: AdapterStats,
    ) -> None:
        self.ws = websocket
        self.controller = controller
        self.settings = settings
        self.stats = stats
        self.guard = FloodGuard(
            settings.ws_media_burst_s, settings.ws_media_max_speed, settings.ws_max_messages_per_s
        )
        self.call: Call | None = None
        self.end_reason = "disconnected"  # until the protocol says better
        self.closed = False

    # ---- what a protocol implements -------------------------------------------------

    async def on_text(self, text: str, now: float) -> None:
        raise SessionError(CloseCode.UNSUPPORTED, "text_frame", "text frames not expected")

    async def on_bytes(self, data: bytes, now: float) -> None:
        raise SessionError(CloseCode.UNSUPPORTED, "binary_frame", "binary frames not expected")

    async def on_fail(self, error: SessionError) -> None:
        """Last words before the socket closes with ``error.code`` (default: none)."""

    async def on_call_ended(self, reason: str) -> None:
        """The bridge ended the call (drain, RTP timeout) before the vendor did."""

    # ---- the session ----------------------------------------------------------------

    async def run(self) -> None:
        watcher = asyncio.create_task(self._watch(), name=f"{self.stats.name}-watch")
        try:
            await self._receive_loop()
        except SessionError as exc:
            await self.fail(exc)
        except Exception:
            log.exception("%s session failed", self.stats.name)
            await self.fail(SessionError(CloseCode.INTERNAL, "internal_error", "internal error"))
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._end_call()

    async def _receive_loop(self) -> None:
        while not self.closed:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                if message.get("code") == CloseCode.TOO_BIG and not self.closed:
                    self.stats.bad["oversized_frame"] += 1  # cut by the server's size bound
                return
            now = time.monotonic()
            self.stats.messages += 1
            self.guard.message(now)
            text, data = message.get("text"), message.get("bytes")
            if text is not None:
                await self.on_text(text, now)
            elif data is not None:
                await self.on_bytes(data, now)

    async def fail(self, error: SessionError) -> None:
        if error.bad:
            self.stats.bad[error.stat] += 1
        else:
            self.stats.calls_refused[error.stat] += 1
        if self.end_reason == "disconnected":
            self.end_reason = "protocol_error" if error.bad else error.stat
        log.info("%s session closed: %s (%s)", self.stats.name, error.stat, error.reason)
        if not self.closed:
            with contextlib.suppress(RuntimeError, OSError):
                await self.on_fail(error)
        await self.close(error.code, error.reason)

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        await close(self.ws, self.stats, code, reason)

    def start_call(self, setup: CallSetup, legs: Sequence[PushedLegSpec]) -> dict[str, PushedLeg]:
        """Start the connection's call; draining or a full bridge refuse it."""
        if self.call is not None:
            raise SessionError(CloseCode.PROTOCOL, "second_start", "the stream already started")
        if self.controller.draining:
            raise SessionError(CloseCode.TRY_AGAIN, "draining", "draining", bad=False)
        try:
            call, handles = self.controller.start_pushed_call(setup, legs)
        except CapacityError:
            raise SessionError(CloseCode.TRY_AGAIN, "capacity", "no capacity", bad=False) from None
        self.call = call
        self.stats.calls_started += 1
        return handles

    def set_paused(self, paused: bool, reason: str) -> None:
        if self.call is not None and self.call.call_id in self.controller.calls:
            self.controller.set_call_paused(self.call.call_id, paused, reason)

    def _end_call(self) -> None:
        call = self.call
        if call is None:
            return
        if call.call_id in self.controller.calls:
            self.controller.end_call(call.call_id, self.end_reason)
            self.stats.calls_ended[self.end_reason] += 1
        else:
            self.stats.calls_ended[call.end_reason or "ended"] += 1

    async def _watch(self) -> None:
        while not self.closed:
            await asyncio.sleep(WATCH_S)
            if self.call is None:
                if time.monotonic() - self.guard.started > self.settings.ws_start_timeout_s:
                    self.stats.bad["start_timeout"] += 1
                    await self.close(CloseCode.PROTOCOL, "no call started in time")
            elif self.call.call_id not in self.controller.calls:
                reason = self.call.end_reason or "ended"
                with contextlib.suppress(RuntimeError, OSError):
                    await self.on_call_ended(reason)
                await self.close(CloseCode.GOING_AWAY, f"call ended: {reason}")
