"""What the media-WebSocket adapters share: close codes, the session error that closes
one connection, per-adapter counters, the flood guard, refusing a connection before
the upgrade, and watching a call that the bridge may end by itself.

A vendor connection is one call. Whatever goes wrong with it (bad JSON, a wrong size,
an oversized or flooding client) closes that connection only, with a clear code and
reason, and is counted by reason; other calls never notice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from fastapi import WebSocket
from starlette.responses import PlainTextResponse

log = logging.getLogger(__name__)


class CloseCode(IntEnum):
    """WebSocket close codes (RFC 6455 §7.4.1) the adapters use."""

    NORMAL = 1000  # the vendor ended the stream
    GOING_AWAY = 1001  # the bridge ended the call (drain, RTP timeout)
    PROTOCOL = 1002  # a message out of order or out of place
    UNSUPPORTED = 1003  # a media format or frame type we cannot take
    BAD_DATA = 1007  # bad JSON, base64, sizes or fields
    POLICY = 1008  # flooding, unauthorized
    TOO_BIG = 1009  # a message over the size bound
    INTERNAL = 1011  # a bug of ours
    TRY_AGAIN = 1013  # no capacity


class SessionError(Exception):
    """Ends one connection: ``code`` and ``reason`` go on the wire, ``stat`` is the
    counter it is counted under."""

    def __init__(self, code: CloseCode, stat: str, reason: str, *, bad: bool = True) -> None:
        super().__init__(reason)
        self.code = code
        self.stat = stat
        self.reason = reason[:120]  # a close reason must fit 123 bytes
        self.bad = bad  # the client's fault (counted in ``bad``), not a refusal of ours


@dataclass(slots=True)
class AdapterStats:
    """Counters one adapter owns; ``snapshot()`` for /metrics and tests."""

    name: str
    connections: int = 0
    messages: int = 0
    audio_bytes: int = 0
    calls_started: int = 0
    dtmf_events: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # before the upgrade
    bad: Counter[str] = field(default_factory=Counter)  # by reason
    closes: Counter[int] = field(default_factory=Counter)  # by close code we sent
    calls_refused: Counter[str] = field(default_factory=Counter)
    calls_ended: Counter[str] = field(default_factory=Counter)  # by end reason
    events: Counter[str] = field(default_factory=Counter)  # protocol messages by type

    def snapshot(self) -> dict[str, Any]:
        return {
            "adapter": self.name,
            "connections": self.connections,
            "messages": self.messages,
            "audio_bytes": self.audio_bytes,
            "calls_started": self.calls_started,
            "dtmf_events": self.dtmf_events,
            "refused": dict(self.refused),
            "bad": dict(self.bad),
            "closes": {str(k): v for k, v in self.closes.items()},
            "calls_refused": dict(self.calls_refused),
            "calls_ended": dict(self.calls_ended),
            "events": dict(self.events),
        }


@dataclass(slots=True)
class FloodGuard:
    """Bounds what one connection may make the bridge do.

    Audio: the media a client delivered may run ahead of the wall clock since the
    session started by ``burst_s`` plus ``max_speed`` times the elapsed time; beyond
    that the client sends faster than real time by a large factor (a replay, a loop,
    an attack) and is closed. Messages of any kind: a token bucket of ``rate`` per
    second with ``2 * rate`` of burst.
    """

    burst_s: float
    max_speed: float
    rate: float
    started: float = field(default_factory=time.monotonic)
    media_s: float = 0.0
    _tokens: float = -1.0
    _last: float = 0.0

    def message(self, now: float) -> None:
        if self._tokens < 0:
            self._tokens, self._last = 2 * self.rate, now
        self._tokens = min(2 * self.rate, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < 1.0:
            raise SessionError(CloseCode.POLICY, "flood_messages", "flood: too many messages")
        self._tokens -= 1.0

    def media(self, seconds: float, now: float) -> None:
        self.media_s += seconds
        if self.media_s > self.burst_s + self.max_speed * (now - self.started):
            raise SessionError(
                CloseCode.POLICY, "flood_media", "flood: audio faster than real time"
            )


async def refuse(
    websocket: WebSocket,
    stats: AdapterStats,
    status: int,
    stat: str,
    detail: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Answer the upgrade request with an HTTP error instead of accepting it.

    403 is the server's own answer to a close before accept (no body); another status
    goes as a denial response (uvicorn's websockets-sansio then logs "returned without
    completing handshake" although the response went out: only 503 while draining)."""
    stats.refused[stat] += 1
    log.info("%s upgrade refused: %d %s", stats.name, status, stat)
    if status != 403:
        response = PlainTextResponse(detail, status_code=status, headers=headers)
        with contextlib.suppress(RuntimeError):  # a server without the denial extension
            await websocket.send_denial_response(response)
            return
    await websocket.close()


async def close(websocket: WebSocket, stats: AdapterStats, code: int, reason: str) -> None:
    """Close our side once; a connection the peer already dropped is left alone."""
    stats.closes[code] += 1
    with contextlib.suppress(RuntimeError, OSError):
        await websocket.close(code, reason[:120])


def bounded_text(value: object, what: str, limit: int = 128) -> str:
    """A vendor's id or number as a short printable string (SessionError otherwise)."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise SessionError(CloseCode.BAD_DATA, "bad_field", f"bad {what}")
    return value
