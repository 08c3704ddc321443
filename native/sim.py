"""Virtual-time harness for the jitter buffer (the NetEQ rtpplay idea, in small).

A schedule of (arrival_ns, datagram) is merged with a pull clock every 20 ms; packets
that arrive at or before a pull are inserted first. Used by the scenario tests and by
``callshield bench jitter`` so both drive the buffer the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from native.codec import build_rtp, ulaw_encode
from native.jitter import Frame, JitterBuffer, PacketOutcome

FRAME_NS = 20_000_000


@dataclass(frozen=True, slots=True)
class Packet:
    """One datagram of a synthetic stream, with the time it was sent."""

    index: int
    send_ns: int
    seq: int
    ts: int
    datagram: bytes


def g711_stream(
    pcm: npt.NDArray[np.int16],
    *,
    ssrc: int = 0x1234ABCD,
    seq0: int = 1000,
    ts0: int = 160_000,
    ptime_ms: int = 20,
    payload_type: int = 0,
    start_ns: int = 0,
    clock_ratio: float = 1.0,
) -> list[Packet]:
    """Packetise 8 kHz PCM as µ-law RTP. ``clock_ratio`` > 1 makes the sender's clock
    run fast (packets sent more often than every ptime of receiver time)."""
    samples = 8 * ptime_ms
    payload = ulaw_encode(pcm[: len(pcm) // samples * samples])
    out = []
    for i in range(len(payload) // samples):
        seq = (seq0 + i) & 0xFFFF
        ts = (ts0 + i * samples) & 0xFFFFFFFF
        send = start_ns + round(i * ptime_ms * 1_000_000 / clock_ratio)
        datagram = build_rtp(
            payload[i * samples : (i + 1) * samples],
            seq=seq,
            ts=ts,
            ssrc=ssrc,
            payload_type=payload_type,
            marker=i == 0,
        )
        out.append(Packet(i, send, seq, ts, datagram))
    return out


@dataclass(slots=True)
class SimResult:
    frames: list[Frame]
    outcomes: dict[int, PacketOutcome]  # packet index -> outcome of its (first) insert
    pull_times: list[int]

    def pcm(self) -> npt.NDArray[np.int16]:
        return np.concatenate([f.pcm for f in self.frames])


def simulate(
    jb: JitterBuffer,
    arrivals: Iterable[tuple[int, int, bytes]],
    *,
    until_ns: int,
    pull_offset_ns: int = 0,
    stop_when_drained: bool = False,
) -> SimResult:
    """Feed (arrival_ns, packet_index, datagram) and pull every 20 ms until `until_ns`,
    or, with `stop_when_drained`, until every packet was inserted and the buffer is empty
    (so the underrun after the stream's end is not part of the result)."""
    schedule: Sequence[tuple[int, int, bytes]] = sorted(arrivals, key=lambda a: (a[0], a[1]))
    frames: list[Frame] = []
    outcomes: dict[int, PacketOutcome] = {}
    pull_times: list[int] = []
    k = 0
    t = pull_offset_ns
    while t <= until_ns:
        while k < len(schedule) and schedule[k][0] <= t:
            arrival, index, datagram = schedule[k]
            outcome = jb.insert(datagram, arrival)
            outcomes.setdefault(index, outcome)
            k += 1
        if stop_when_drained and k == len(schedule) and buffered_units(jb) == 0:
            break
        frames.append(jb.pull(t))
        pull_times.append(t)
        t += FRAME_NS
    return SimResult(frames, outcomes, pull_times)


def buffered_units(jb: JitterBuffer) -> int:
    """2.5 ms units of audio held in the buffer right now."""
    s = jb.stats()
    return s["units_accepted"] - s["units_played"] - s["units_flushed"] - s["units_dropped"]
