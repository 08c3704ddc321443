"""Asterisk AudioSocket over TCP (res_audiosocket / app_audiosocket / chan_audiosocket).

Wire format: frames of a 1-byte kind, a 2-byte big-endian payload length and the
payload. Kinds: 0x00 hangup (no payload), 0x01 UUID (16 bytes, the first frame), 0x03
DTMF (one ASCII digit), 0x10 signed linear 16-bit little-endian mono at 8 kHz, 0x11-0x18
the same at 12, 16, 24, 32, 44.1, 48, 96 and 192 kHz (Asterisk 20.17/21.12/22.7/23.1 and
later), 0xff error (an optional 1-byte code). One connection is one direction of a call,
so one leg; the UUID names it.

Accepted only from an allowlisted address (settings ``audiosocket_allow``) and only for
a UUID registered beforehand through the control API (``audiosocket_calls``): anything
else is closed and counted, and no call is created. AudioSocket has no timestamps:
packet offsets are the running sample count, arrival times come from the clock, so
the jitter buffer sees an ordered stream. DTMF frames go to the leg's DTMF tracker as
RFC 4733 events (never kept as digits). Robustness: unknown kinds are skipped and
counted; a wrong size for its kind, an oversized or truncated frame, a missing UUID,
a rate the native core does not decode, a silent or slow client, and a client sending
much faster than real time each close that connection only, counted by reason.

The bridge never sends anything back: it only listens. Closing our side ends the
ExternalMedia channel (or the ``AudioSocket()`` application's step in the dialplan),
which is why the recommended setup is ExternalMedia on snoop channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sip_bridge.adapters.audiosocket_calls import AudioSocketCalls, AudioSocketTarget, RegisteredLeg
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.adapters.pcm import L16_PTS, Pacing
from sip_bridge.attach import host_port
from sip_bridge.settings import Settings

log = logging.getLogger(__name__)

KIND_HANGUP = 0x00
KIND_UUID = 0x01
KIND_DTMF = 0x03
KIND_ERROR = 0xFF
SLIN_RATES: dict[int, int] = {
    0x10: 8000,
    0x11: 12000,
    0x12: 16000,
    0x13: 24000,
    0x14: 32000,
    0x15: 44100,
    0x16: 48000,
    0x17: 96000,
    0x18: 192000,
}
MAX_PAYLOAD = 16384  # 20 ms at 192 kHz is 7680 bytes; Asterisk never sends more
DTMF_DIGITS = frozenset("0123456789*#ABCD")
DTMF_MS = 100  # a DTMF frame carries no duration


class _ClosedError(Exception):
    """Ends one connection, with the reason it is counted under."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class AudioSocketStats:
    connections: int = 0
    frames: Counter[str] = field(default_factory=Counter)  # by kind name
    audio_bytes: int = 0
    dtmf_events: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # before a leg was claimed
    bad: Counter[str] = field(default_factory=Counter)  # protocol faults by reason
    legs_ended: Counter[str] = field(default_factory=Counter)  # by reason
    error_codes: Counter[int] = field(default_factory=Counter)  # 0xff frames by code

    def snapshot(self) -> dict[str, Any]:
        return {
            "adapter": "audiosocket",
            "connections": self.connections,
            "frames": dict(self.frames),
            "audio_bytes": self.audio_bytes,
            "dtmf_events": self.dtmf_events,
            "refused": dict(self.refused),
            "bad": dict(self.bad),
            "legs_ended": dict(self.legs_ended),
            "error_codes": {str(k): v for k, v in self.error_codes.items()},
        }


_KIND_NAMES = {KIND_HANGUP: "hangup", KIND_UUID: "uuid", KIND_DTMF: "dtmf", KIND_ERROR: "error"}
_BAD = frozenset(
    {"oversized", "truncated", "bad_size", "unsupported_rate", "flood", "idle", "slow", "no_uuid"}
)


class AudioSocketServer:
    """The TCP listener on settings ``audiosocket_listen``, on the bridge's loop."""

    def __init__(
        self,
        calls: AudioSocketCalls,
        settings: Settings,
        *,
        uuid_timeout_s: float = 5.0,
        idle_timeout_s: float | None = None,
        slack_s: float = 1.0,
    ) -> None:
        address = settings.audiosocket_address
        if address is None:
            raise ValueError("audiosocket_listen is off")
        self.calls = calls
        self.host, self.port = address
        self.advertised = settings.advertised_address or self.host
        self.allow = settings.audiosocket_networks
        self.uuid_timeout_s = uuid_timeout_s
        self.idle_timeout_s = idle_timeout_s or settings.rtp_timeout_s
        self.slack_s = slack_s
        self.stats = AudioSocketStats()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        host, port = self.address
        log.info("AudioSocket on tcp://%s", host_port(host, port))

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    def target(self) -> AudioSocketTarget:
        """Where Asterisk connects (for the control API's answer)."""
        port = self.address[1] if self._server is not None else self.port
        return AudioSocketTarget(
            host=self.advertised, port=port, external_host=host_port(self.advertised, port)
        )

    def snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot()

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None

    # ---- one connection --------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        self._writers.add(writer)
        leg: RegisteredLeg | None = None
        reason = "closed"
        try:
            peer = writer.get_extra_info("peername")
            if not self._allowed(peer):
                self.stats.refused["address"] += 1
                return
            leg = await self._claim(reader)
            if leg is None:
                return
            reason = await self._stream(reader, leg)
        except _ClosedError as exc:
            reason = exc.reason
            if reason in _BAD:
                self.stats.bad[reason] += 1
        except (ConnectionError, OSError):
            reason = "closed"
        finally:
            self._writers.discard(writer)
            writer.close()
            if leg is not None:
                self.stats.legs_ended[reason] += 1
                if not leg.pushed.closed:
                    self.calls.release(leg, "hangup" if reason == "hangup" else reason)
                else:
                    leg.state = "ended"

    def _allowed(self, peer: Any) -> bool:
        try:
            addr = ipaddress.ip_address(peer[0])
        except (TypeError, ValueError, IndexError):
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.allow)

    async def _claim(self, reader: asyncio.StreamReader) -> RegisteredLeg | None:
        kind, payload = await self._frame(reader, self.uuid_timeout_s, first=True)
        if kind != KIND_UUID or len(payload) != 16:
            raise _ClosedError("no_uuid")
        self.stats.frames["uuid"] += 1
        claimed = self.calls.claim(payload)
        if isinstance(claimed, str):
            self.stats.refused[claimed] += 1
            return None
        return claimed

    async def _frame(
        self, reader: asyncio.StreamReader, timeout: float, first: bool = False
    ) -> tuple[int, bytes]:
        """One frame. ``timeout`` bounds the wait for its header (a timeout there
        consumes nothing); the payload may then take up to the idle timeout."""
        try:
            header = await asyncio.wait_for(reader.readexactly(3), timeout)
        except TimeoutError:
            raise _ClosedError("no_uuid" if first else "idle") from None
        except asyncio.IncompleteReadError as exc:
            raise _ClosedError("truncated" if exc.partial else "closed") from None
        kind, length = struct.unpack("!BH", header)
        if length > MAX_PAYLOAD:
            raise _ClosedError("oversized")
        try:
            payload = await asyncio.wait_for(
                reader.readexactly(length), max(timeout, self.idle_timeout_s)
            )
        except TimeoutError:
            raise _ClosedError("slow") from None  # a header, then its payload never came
        except asyncio.IncompleteReadError:
            raise _ClosedError("truncated") from None
        return kind, payload

    async def _stream(self, reader: asyncio.StreamReader, leg: RegisteredLeg) -> str:
        """Frames until hangup or close; returns why the leg ended."""
        packetizer: Packetizer | None = None
        pacing: Pacing | None = None
        idle_deadline = time.monotonic() + self.idle_timeout_s
        while True:
            try:
                kind, payload = await self._frame(reader, 1.0)
            except _ClosedError as exc:
                if exc.reason != "idle" or time.monotonic() > idle_deadline:
                    raise
                if leg.pushed.closed:
                    return "call_ended"
                continue
            idle_deadline = time.monotonic() + self.idle_timeout_s
            now_ns = time.monotonic_ns()
            rate = SLIN_RATES.get(kind)
            if rate is not None:
                self.stats.frames["audio"] += 1
                if rate not in leg.rates:
                    raise _ClosedError("unsupported_rate")
                if len(payload) % 2:
                    raise _ClosedError("bad_size")
                if packetizer is None:
                    packetizer = Packetizer(leg.pushed, L16_PTS[rate], rate, 2)
                    pacing = Pacing(rate, self.slack_s)
                elif packetizer.clock_rate != rate:
                    self.stats.bad["rate_changed"] += 1
                    continue
                assert pacing is not None
                if not pacing.admit(len(payload) // 2, now_ns):
                    raise _ClosedError("flood")
                self.stats.audio_bytes += len(payload)
                packetizer.write(payload, now_ns)
                if leg.pushed.closed:
                    return "call_ended"
            elif kind == KIND_HANGUP:
                self.stats.frames["hangup"] += 1
                return "hangup"
            elif kind == KIND_DTMF:
                self.stats.frames["dtmf"] += 1
                self._dtmf(packetizer, payload, now_ns)
            elif kind == KIND_ERROR:
                self.stats.frames["error"] += 1
                self.stats.error_codes[payload[0] if payload else 0] += 1
            elif kind == KIND_UUID:
                self.stats.bad["uuid_repeated"] += 1
            else:
                self.stats.bad["unknown_kind"] += 1

    def _dtmf(self, packetizer: Packetizer | None, payload: bytes, now_ns: int) -> None:
        digit = payload.decode("ascii", "replace").upper() if len(payload) == 1 else ""
        if digit not in DTMF_DIGITS:
            self.stats.bad["bad_dtmf"] += 1
        elif packetizer is None:
            self.stats.bad["dtmf_before_audio"] += 1
        else:
            duration = packetizer.clock_rate * DTMF_MS // 1000
            start = max(0, packetizer.next_offset - duration)
            if packetizer.dtmf(digit, start, duration, now_ns):
                self.stats.dtmf_events += 1
