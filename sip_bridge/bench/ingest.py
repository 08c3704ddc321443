"""RTP ingest: native C receiver (epoll+recvmmsg) vs an asyncio DatagramProtocol baseline.

Every receiver takes the same paced load in the same run, one after the other (one
sender process, ``sip_bridge.bench.rtp_load``; one UDP socket per stream on 127.0.0.1;
G.711 20 ms packets):

(a) native: ``native.ingest.Ingest`` — a C thread, kernel timestamps, RTP parse, source
    lock and jitter-buffer insert; the main thread pulls every stream every 20 ms. Run
    twice: waking for every datagram (coalesce 0), and with wakeups coalesced
    (``--coalesce-us``, default 1000: at most ~1,000 wakeups/s, for up to 1 ms latency).
(b) asyncio: one ``DatagramProtocol`` per socket that parses the RTP header with
    ``struct`` and appends to a per-stream deque (drained every 20 ms).

Per receiver: packets/s received; CPU µs per packet over a steady-state window (after
``--warmup`` seconds; native: the receiver thread's own CPU clock, asyncio: the
process's CPU clock; process CPU is reported for both); app-level loss (sent vs
received per stream, whole run) and the kernel's ``Udp: RcvbufErrors`` delta from
/proc/net/snmp; latency. Latency definitions differ and are labelled: native = kernel
receive timestamp -> just after the jitter-buffer insert (C histogram, 1 µs buckets
below 1 ms), plus the C code's own processing time (recvmmsg returned -> inserted);
asyncio has no kernel timestamp, so it is the sender's send time (carried in the
payload) -> the callback's append. On loopback the kernel stamps a datagram inside the
sender's sendto, so the two are close to comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import socket
import struct
import subprocess
import sys
import time
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from sip_bridge.bench.report import summarize

_RTP = struct.Struct("!BBHII")
_SENT_AT = struct.Struct("!q")
DRAIN_S = 0.3  # after the sender stops, time for queues to empty before reading counters
RECEIVERS = ("native", "native_coalesced", "asyncio")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pps",
        type=int,
        nargs="+",
        default=[20_000],
        help="total packets/s offered; several values run one after another "
        "(default 20000 = 200 calls x 2 legs x 50 pps)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        help="UDP streams (sockets); default pps / 50, i.e. 20 ms G.711 legs",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured send time")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured send time first")
    parser.add_argument("--batch", type=int, default=32, help="native recvmmsg batch")
    parser.add_argument(
        "--coalesce-us",
        type=int,
        default=1000,
        help="wakeup coalescing of the native_coalesced run (0: skip that run)",
    )
    parser.add_argument(
        "--only", choices=list(RECEIVERS), default=None, help="measure one receiver only"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for pps in args.pps:
        streams = args.streams or max(1, pps // 50)
        payload = round(8000 * streams / pps)
        if payload % 20 or payload < 20:
            raise SystemExit(f"{pps} pps over {streams} streams is not a whole 2.5 ms ptime")
        result: dict[str, Any] = {
            "offered_pps": pps,
            "streams": streams,
            "ptime_ms": payload / 8,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
        }
        for name in RECEIVERS:
            skip_coalesced = name == "native_coalesced" and not args.coalesce_us
            if args.only not in (None, name) or skip_coalesced:
                continue
            rx: _Receiver
            if name == "asyncio":
                rx = _AsyncioReceiver(streams)
            else:
                coalesce = args.coalesce_us if name == "native_coalesced" else 0
                rx = _NativeReceiver(streams, args.batch, coalesce)
            result[name] = _measure(rx, pps, payload, args)
        base = result.get("asyncio")
        for name in ("native", "native_coalesced"):
            if base and name in result:
                n = result[name]
                result[f"cpu_ratio_asyncio_over_{name}"] = {
                    "receiver": _ratio(base["cpu_us_per_packet"], n["cpu_us_per_packet"]),
                    "process": _ratio(
                        base["process_cpu_us_per_packet"], n["process_cpu_us_per_packet"]
                    ),
                }
        runs.append(result)
    return {
        "benchmark": "ingest",
        "sender": "python -m sip_bridge.bench.rtp_load: a separate process, socket.sendto "
        "paced in 1 ms slots, one socket",
        "goals": {"cpu_ratio_min": 4.0, "loss_at_40kpps": 0, "p99_9_us_max": 50.0},
        "runs": runs,
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


# ---- measurement harness -----------------------------------------------------------------


class _Receiver:
    """What _measure needs from a receiver: ports, a run loop, counters, its numbers."""

    def addresses(self) -> list[tuple[str, int]]:
        raise NotImplementedError

    def run_until(self, done: Callable[[], bool], window: _Window) -> None:
        """Receive until done(), then DRAIN_S longer; call window.tick(self) every 20 ms."""
        raise NotImplementedError

    def received(self) -> list[int]:
        """Datagrams received so far, per stream."""
        raise NotImplementedError

    def cpu_ns(self) -> int:
        """CPU time of the receiving code so far."""
        raise NotImplementedError

    def report(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _Window:
    """The steady-state window: snapshots at mark_at (after warm-up) and at the end."""

    def __init__(self, mark_at: float) -> None:
        self.mark_at = mark_at
        self.start: tuple[float, int, int, int] | None = None
        self.end: tuple[float, int, int, int] | None = None

    @staticmethod
    def _snap(rx: _Receiver) -> tuple[float, int, int, int]:
        return time.monotonic(), rx.cpu_ns(), time.process_time_ns(), sum(rx.received())

    def tick(self, rx: _Receiver) -> None:
        if self.start is None and time.monotonic() >= self.mark_at:
            self.start = self._snap(rx)

    def finish(self, rx: _Receiver) -> dict[str, Any]:
        self.end = self._snap(rx)
        start = self.start or self.end
        wall = self.end[0] - start[0]
        packets = self.end[3] - start[3]
        return {
            "window_s": wall,
            "window_packets": packets,
            "cpu_us_per_packet": (self.end[1] - start[1]) / 1e3 / max(packets, 1),
            "cpu_share": (self.end[1] - start[1]) / 1e9 / max(wall, 1e-9),
            "process_cpu_us_per_packet": (self.end[2] - start[2]) / 1e3 / max(packets, 1),
            "process_cpu_share": (self.end[2] - start[2]) / 1e9 / max(wall, 1e-9),
        }


def _measure(rx: _Receiver, pps: int, payload: int, args: argparse.Namespace) -> dict[str, Any]:
    job = {
        "dests": rx.addresses(),
        "pps": pps,
        "seconds": args.warmup + args.seconds,
        "payload_bytes": payload,
    }
    sender = subprocess.Popen(
        [sys.executable, "-m", "sip_bridge.bench.rtp_load"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sender.stdin is not None and sender.stdout is not None
    try:
        sender.stdin.write(json.dumps(job) + "\n")
        sender.stdin.flush()
        if sender.stdout.readline().strip() != "ready":
            raise RuntimeError("load generator failed to start")
        snmp0 = _udp_snmp()
        window = _Window(time.monotonic() + args.warmup)
        sender.stdin.write("go\n")
        sender.stdin.flush()
        rx.run_until(lambda: sender.poll() is not None, window)
        steady = window.finish(rx)
        snmp1 = _udp_snmp()
        load: dict[str, Any] = json.loads(sender.stdout.readline())
        got = rx.received()
        out = rx.report()
    finally:
        rx.close()
        if sender.poll() is None:
            sender.kill()
        sender.wait()
    sent = load["sent"]
    lost = [max(0, s - r) for s, r in zip(sent, got, strict=True)]
    send_s = (load["finished_ns"] - load["started_ns"]) / 1e9
    out.update(steady)
    out.update(
        sent=sum(sent),
        received=sum(got),
        sent_pps=sum(sent) / send_s,
        received_pps=sum(got) / send_s,
        app_loss=sum(lost),
        streams_with_loss=sum(1 for x in lost if x),
        rcvbuf_errors_delta=snmp1.get("RcvbufErrors", 0) - snmp0.get("RcvbufErrors", 0),
        udp_in_errors_delta=snmp1.get("InErrors", 0) - snmp0.get("InErrors", 0),
        sender_cpu_share=load["cpu_s"] / send_s,
        sender_late_slots=load["late_slots"],
        sender_errors=load["send_errors"],
    )
    return out


def _udp_snmp() -> dict[str, int]:
    """The kernel's Udp: counters from /proc/net/snmp (system-wide)."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Udp:")]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:], strict=False)}


def _bind(rcvbuf: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE (CAP_NET_ADMIN)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind(("127.0.0.1", 0))
    return s


# ---- (a) native ------------------------------------------------------------------------------


class _NativeReceiver(_Receiver):
    def __init__(self, streams: int, batch: int, coalesce_us: int) -> None:
        from native.ingest import Ingest

        self.coalesce_us = coalesce_us
        self.ing = Ingest(streams, batch=batch, coalesce_us=coalesce_us)
        self.ids = [
            self.ing.add_stream(0, min_delay_ms=40, max_delay_ms=200) for _ in range(streams)
        ]
        self.ing.start()
        self.counters0 = self.ing.counters()
        self.pull_cpu_ns = 0
        self.pulls = 0

    def addresses(self) -> list[tuple[str, int]]:
        return [self.ing.local_address(i) for i in self.ids]

    def run_until(self, done: Callable[[], bool], window: _Window) -> None:
        tick = time.monotonic_ns()
        stop_at: float | None = None
        while stop_at is None or time.monotonic() < stop_at:
            tick += 20_000_000
            delay = tick - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            c0 = time.thread_time_ns()
            self.ing.pull_all(time.monotonic_ns())
            self.pull_cpu_ns += time.thread_time_ns() - c0
            self.pulls += 1
            window.tick(self)
            if stop_at is None and done():
                stop_at = time.monotonic() + DRAIN_S

    def received(self) -> list[int]:
        return [int(self.ing.stream_counters(i)["datagrams"]) for i in self.ids]

    def cpu_ns(self) -> int:
        return self.ing.thread_cpu_ns()

    def report(self) -> dict[str, Any]:
        c, c0 = self.ing.counters(), self.counters0
        wakeups = c["wakeups"] - c0["wakeups"]
        return {
            "receiver": "native: C thread, epoll + recvmmsg, parse + source lock + jb insert"
            f", coalesce_us={self.coalesce_us}; CPU = the receiver thread's clock",
            "wakeups": wakeups,
            "recvmmsg_calls": c["recvmmsg_calls"] - c0["recvmmsg_calls"],
            "datagrams_per_wakeup": (c["datagrams"] - c0["datagrams"]) / max(1, wakeups),
            "pull_cpu_us_per_stream_frame": self.pull_cpu_ns
            / 1e3
            / max(1, self.pulls * len(self.ids)),
            "latency": _histogram_summary(
                self.ing.latency(), "kernel SO_TIMESTAMPNS -> after jitter-buffer insert"
            ),
            "processing": _histogram_summary(
                self.ing.processing(), "recvmmsg returned -> after jitter-buffer insert"
            ),
        }

    def close(self) -> None:
        self.ing.close()


def _histogram_summary(h: Any, definition: str) -> dict[str, Any]:
    """p50/p90/p99/p99.9 (bucket upper edges: 1 µs below 1 ms, then powers of two) in µs."""
    out: dict[str, Any] = {"definition": definition, "unit": "us", "n": h.count}
    out["mean"] = h.sum_ns / max(h.count, 1) / 1e3
    for q, key in ((50, "p50"), (90, "p90"), (99, "p99"), (99.9, "p99.9")):
        out[key] = h.percentile_ns(q) / 1e3
    out["max"] = h.max_ns / 1e3
    out["negative"] = h.negative
    return out


# ---- (b) asyncio baseline ------------------------------------------------------------------


class _Proto(asyncio.DatagramProtocol):
    """Parse the RTP header in Python, append to the stream's deque."""

    def __init__(self, rx: _AsyncioReceiver, index: int) -> None:
        self.rx, self.index = rx, index
        self.queue: collections.deque[tuple[int, int, bytes, int]] = collections.deque()

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        now = time.monotonic_ns()
        if len(data) < 20:
            return
        first, _pt, seq, ts, _ssrc = _RTP.unpack_from(data)
        if first >> 6 != 2:
            return
        self.queue.append((seq, ts, data[12:], now))
        self.rx.counts[self.index] += 1
        self.rx.latency.append(now - _SENT_AT.unpack_from(data, 12)[0])


class _AsyncioReceiver(_Receiver):
    def __init__(self, streams: int) -> None:
        self.socks = [_bind(4 << 20) for _ in range(streams)]
        self.counts = [0] * streams
        self.latency = array("q")
        self.protos: list[_Proto] = []

    def addresses(self) -> list[tuple[str, int]]:
        return [s.getsockname()[:2] for s in self.socks]

    def run_until(self, done: Callable[[], bool], window: _Window) -> None:
        asyncio.run(self._main(done, window))

    async def _main(self, done: Callable[[], bool], window: _Window) -> None:
        loop = asyncio.get_running_loop()
        transports = []
        for i, s in enumerate(self.socks):
            proto = _Proto(self, i)
            transport, _ = await loop.create_datagram_endpoint(
                functools.partial(_same, proto), sock=s
            )
            transports.append(transport)
            self.protos.append(proto)
        stop_at: float | None = None
        while stop_at is None or loop.time() < stop_at:
            await asyncio.sleep(0.02)
            for proto in self.protos:  # the consumer side: take what arrived
                proto.queue.clear()
            window.tick(self)
            if stop_at is None and done():
                stop_at = loop.time() + DRAIN_S
        for t in transports:
            t.close()

    def received(self) -> list[int]:
        return list(self.counts)

    def cpu_ns(self) -> int:
        return time.process_time_ns()

    def report(self) -> dict[str, Any]:
        lat = np.frombuffer(self.latency, dtype=np.int64) / 1e3
        latency = summarize(lat, unit="us")
        latency["definition"] = "sender send time (payload) -> DatagramProtocol append"
        return {
            "receiver": "asyncio: DatagramProtocol per socket, struct parse, deque append; "
            "CPU = the process's clock",
            "latency": latency,
        }

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _same(proto: _Proto) -> _Proto:
    return proto
