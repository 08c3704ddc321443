"""Paced RTP load generator for ``callshield bench ingest``, run in its own process.

``python -m sip_bridge.bench.rtp_load`` reads one JSON job from stdin (dests, pps,
seconds, payload_bytes, optional cpu), binds one UDP socket per stream (so every leg has
its own source port, as real peers do, whether the destinations are one port per leg or
one shared port), prints ``{"ready": [[host, port], ...]}`` (each stream's source
address), waits for a ``go`` line, sends, and prints its LoadResult as one JSON line.
With ``cpu`` the sender pins itself to that CPU.

Python has no ``sendmmsg``, so this is a plain ``socket.sendto`` loop, paced in 1 ms
slots: every stream sends one G.711 packet per ptime, at a phase spread evenly over the
ptime, so the receiver sees the steady interleaving of many 50 pps legs rather than
bursts per stream. The first 8 payload bytes carry the send time
(``time.monotonic_ns()``, a system-wide clock on Linux), which lets a receiver without
kernel timestamps (the asyncio baseline) measure its own arrival-to-buffer latency.
On loopback the kernel's receive work (softirq) runs in the sender's syscalls, so the
sender's CPU also pays for part of the receive path; its CPU is reported.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass

__all__ = ["LoadResult", "main", "send_load"]

SLOT_NS = 1_000_000
_HEADER = struct.Struct("!BBHIIq")  # RTP fixed header + send time (first payload bytes)


@dataclass(frozen=True, slots=True)
class LoadResult:
    sent: list[int]  # packets sent per stream
    send_errors: int
    started_ns: int  # monotonic time of the first slot
    finished_ns: int
    cpu_s: float  # sender process CPU (user + system)
    late_slots: int  # slots that started more than 1 ms late


def send_load(
    dests: list[tuple[str, int]], pps: int, seconds: float, payload_bytes: int
) -> LoadResult:
    """Bind a socket per stream, print the sources, wait for ``go``, send for `seconds`."""
    n = len(dests)
    period_ns = int(n * 1e9 / pps)  # one packet per stream per period (the ptime)
    samples = payload_bytes  # G.711: one byte per 8 kHz sample
    socks = [_bound(host) for host, _ in dests]
    # stream i sends at phase i * period / n within each period
    phase = [i * period_ns // n for i in range(n)]
    seq = [0] * n
    sent = [0] * n
    buf = bytearray(_HEADER.size + payload_bytes - 8)
    buf[_HEADER.size :] = b"\xff" * (len(buf) - _HEADER.size)
    errors = late = 0
    sources = [list(sk.getsockname()[:2]) for sk in socks]
    print(json.dumps({"ready": sources}), flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("rtp_load: expected 'go'")
    t0 = time.monotonic_ns() + 2 * SLOT_NS
    end = t0 + int(seconds * 1e9)
    cpu0 = os.times()
    slot_end = t0
    nxt = 0  # next stream (in phase order) to send within the current period
    period_start = t0
    while True:
        now = time.monotonic_ns()
        if now < slot_end:
            time.sleep((slot_end - now) / 1e9)
        elif now - slot_end > SLOT_NS:
            late += 1
        if slot_end >= end:
            break
        slot_end += SLOT_NS
        # send every packet whose due time is before the end of this slot
        while period_start + phase[nxt] < slot_end:
            i = nxt
            _HEADER.pack_into(
                buf,
                0,
                0x80,
                0,
                seq[i] & 0xFFFF,
                (seq[i] * samples) & 0xFFFFFFFF,
                0x10000 + i,
                time.monotonic_ns(),
            )
            try:
                socks[i].sendto(buf, dests[i])
                sent[i] += 1
            except OSError:
                errors += 1
            seq[i] += 1
            nxt += 1
            if nxt == n:
                nxt = 0
                period_start += period_ns
    cpu1 = os.times()
    result = LoadResult(
        sent,
        errors,
        t0,
        time.monotonic_ns(),
        (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
        late,
    )
    for sk in socks:
        sk.close()
    return result


def _bound(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    return sock


def main() -> int:
    job = json.loads(sys.stdin.readline())
    if job.get("cpu") is not None:
        os.sched_setaffinity(0, {int(job["cpu"])})
    dests = [(str(h), int(p)) for h, p in job["dests"]]
    result = send_load(dests, int(job["pps"]), float(job["seconds"]), int(job["payload_bytes"]))
    print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
