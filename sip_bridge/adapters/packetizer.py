"""Timed PCM chunks -> the jitter buffer, for transports that carry no RTP.

Media WebSockets and AudioSocket deliver audio as chunks with (at best) their own
counters: Twilio's ``timestamp`` (ms) and ``chunk``, AudioHook's ``position``, or just
the order on a TCP stream. :class:`Packetizer` turns them into RTP-like packets whose
header fields come from the sample offset of the chunk in the stream, so a duplicate
chunk gets the same sequence number and timestamp (counted as a duplicate), a late one
is reordered or late, and a missing one is a gap the jitter buffer conceals: exactly
what happens to RTP.

Packets are cut at fixed 10 ms units of the stream (``seq = offset // unit``) so any
chunk size that is a multiple of 10 ms maps to consecutive sequence numbers. A chunk
that ends inside a unit leaves the rest of that unit in a carry, completed by the next
chunk if it continues exactly where this one ended, else dropped (and counted).

Digits a transport reports as text (Twilio ``dtmf``, AudioSocket DTMF frames) go in as
RFC 4733 telephone-events, so they reach the C DTMF tracker like any RTP event and never
exist anywhere else (DESIGN §2).
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass, field

from sip_bridge.media import PushedLeg

UNIT_MS = 10
_DTMF_CODES = {**{str(d): d for d in range(10)}, "*": 10, "#": 11, "A": 12, "B": 13, "C": 14}
_DTMF_CODES["D"] = 15


@dataclass(slots=True)
class PacketizerStats:
    chunks: int = 0
    packets: int = 0
    bytes: int = 0
    carry_dropped: int = 0  # partial units lost because the next chunk did not continue
    odd_bytes: int = 0  # chunks whose length was not a whole number of samples
    dtmf_events: int = 0
    closed_drops: int = 0  # chunks dropped because the leg had closed


@dataclass
class Packetizer:
    """One leg's chunks -> pushed packets.

    ``payload_type`` must be in the leg's payload-type table; ``sample_bytes`` is 1 for
    G.711, 2 for L16 (little-endian transports use the table's ``L16LE`` codec: the C
    decoder reads their byte order, nothing is swapped here).
    """

    leg: PushedLeg
    payload_type: int
    clock_rate: int = 8000
    sample_bytes: int = 1
    ssrc: int = field(default_factory=lambda: secrets.randbits(32))
    ts0: int = field(default_factory=lambda: secrets.randbits(32))
    stats: PacketizerStats = field(default_factory=PacketizerStats)
    _carry: bytes = b""
    _carry_offset: int = -1  # sample offset where the carry starts
    _next_offset: int = 0  # where the next contiguous chunk would start

    @property
    def unit_samples(self) -> int:
        return self.clock_rate * UNIT_MS // 1000

    @property
    def next_offset(self) -> int:
        """The sample offset right after the last chunk written (for transports that
        count nothing themselves: the next chunk's offset on an ordered stream)."""
        return self._next_offset

    def write(self, chunk: bytes, arrival_ns: int, offset: int | None = None) -> int:
        """Push one chunk starting at sample ``offset`` of the stream (None: right after
        the previous chunk). Returns the number of packets pushed; 0 once the leg closed."""
        if self.leg.closed:
            self.stats.closed_drops += 1
            return 0
        self.stats.chunks += 1
        self.stats.bytes += len(chunk)
        sb = self.sample_bytes
        if len(chunk) % sb:
            self.stats.odd_bytes += 1
            chunk = chunk[: len(chunk) - len(chunk) % sb]
        if offset is None:
            offset = self._next_offset
        if self._carry:
            if offset == self._carry_offset + len(self._carry) // sb:
                chunk, offset = self._carry + chunk, self._carry_offset
            else:
                self.stats.carry_dropped += 1
            self._carry, self._carry_offset = b"", -1
        n = len(chunk) // sb
        self._next_offset = max(self._next_offset, offset + n)
        unit = self.unit_samples
        pos, pushed = 0, 0
        skip = (-offset) % unit  # a chunk starting mid-unit: its head cannot be placed
        if skip:
            pos = min(skip, n)
        while pos < n:
            take = min(unit, n - pos)
            if take < unit:
                self._carry, self._carry_offset = chunk[pos * sb :], offset + pos
                break
            pushed += self._push(chunk[pos * sb : (pos + take) * sb], offset + pos, arrival_ns)
            pos += take
        if not pushed and self.leg.closed:
            self.stats.closed_drops += 1
        return pushed

    def _push(self, body: bytes, offset: int, arrival_ns: int) -> int:
        seq = offset // self.unit_samples
        rc = self.leg.push_payload(
            self.payload_type, seq, self.ts0 + offset, self.ssrc, body, arrival_ns
        )
        if rc < 0:
            return 0
        self.stats.packets += 1
        return 1

    def dtmf(self, digit: str, offset: int, duration_samples: int, arrival_ns: int) -> bool:
        """A digit the transport reported as text, as an RFC 4733 event at ``offset``
        lasting ``duration_samples``: a start payload and three end payloads (as a
        phone sends them), straight to the leg's DTMF tracker. False for a character
        that is not a DTMF digit."""
        code = _DTMF_CODES.get(digit.upper())
        if code is None or self.leg.closed:
            return False
        ts = self.ts0 + offset
        duration = max(1, min(duration_samples, 0xFFFF))
        start = struct.pack("!BBH", code, 10, min(duration, self.unit_samples))
        end = struct.pack("!BBH", code, 0x80 | 10, duration)
        self.leg.push_event(start, ts, arrival_ns, self.clock_rate)
        for _ in range(3):
            self.leg.push_event(end, ts, arrival_ns, self.clock_rate)
        self.stats.dtmf_events += 1
        return True
