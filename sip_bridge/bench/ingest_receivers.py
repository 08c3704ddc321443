"""The receivers ``callshield bench ingest`` compares, behind one small interface.

native (``native.ingest.Ingest``, a C thread: kernel timestamps, RTP parse, source lock,
jitter-buffer insert; the main thread pulls every leg every 20 ms):
  - per-leg sockets: one UDP socket per leg (``add_stream``);
  - shared: one UDP socket for every leg (``add_socket`` + ``add_stream_shared``), legs
    told apart in C by the sender's source address (given to the leg, as from SDP);
  each with or without paced wakeups (``coalesce_us``).
asyncio (the baseline: one ``DatagramProtocol``, RTP header parsed with ``struct``,
appended to a per-leg deque that the loop drains every 20 ms):
  - per-leg sockets: one protocol per socket;
  - shared: one protocol on one socket, legs told apart by a dict keyed by source.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import functools
import os
import socket
import struct
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sip_bridge.bench.report import summarize

if TYPE_CHECKING:
    from native.ingest_types import LegOptions

__all__ = ["AsyncioReceiver", "NativeReceiver", "Pinning", "Receiver", "Window"]

_RTP = struct.Struct("!BBHII")
_SENT_AT = struct.Struct("!q")
# datagrams one native receiver drains from a socket per wakeup (batch x max_batches),
# whatever --batch is: the Ingest default, 16 x 8
DRAIN_PER_WAKEUP = 128
Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Pinning:
    """CPUs for the receive side: the receiving thread, and the rest of the process."""

    receiver_cpu: int
    other_cpus: frozenset[int]


class Receiver(abc.ABC):
    """What the harness needs from a receiver: ports, a run loop, counters, its numbers."""

    @abc.abstractmethod
    def addresses(self) -> list[Address]:
        """Where stream i's packets go (the same port for every stream when shared)."""
        ...

    def attach(self, sources: list[Address]) -> None:
        """Stream i's packets come from sources[i] (known before the sender starts).
        Receivers that do not demultiplex by source ignore it."""
        del sources

    @abc.abstractmethod
    def run_until(self, done: Callable[[], bool], window: Window) -> None:
        """Receive until done() (checked, with window.tick(self), every 20 ms)."""
        ...

    @abc.abstractmethod
    def received(self) -> list[int]:
        """Datagrams received so far, per stream."""
        ...

    def received_total(self) -> int:
        """Datagrams received so far (cheap: read at the window's edges)."""
        return sum(self.received())

    @abc.abstractmethod
    def cpu_ns(self) -> int:
        """CPU time of the receiving code so far."""
        ...

    @abc.abstractmethod
    def report(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class Window:
    """The steady-state window: snapshots at mark_at (after warm-up) and at the end."""

    def __init__(self, mark_at: float) -> None:
        self.mark_at = mark_at
        self.start: tuple[float, int, int, int, int] | None = None

    @staticmethod
    def _snap(rx: Receiver) -> tuple[float, int, int, int, int]:
        packets = rx.received_total()
        return time.monotonic(), rx.cpu_ns(), time.process_time_ns(), packets, _busy_ns()

    def tick(self, rx: Receiver) -> None:
        if self.start is None and time.monotonic() >= self.mark_at:
            self.start = self._snap(rx)

    def finish(self, rx: Receiver) -> dict[str, Any]:
        end = self._snap(rx)
        start = self.start or end
        wall = max(end[0] - start[0], 1e-9)
        packets = max(end[3] - start[3], 1)
        return {
            "window_s": wall,
            "window_packets": end[3] - start[3],
            "cpu_us_per_packet": (end[1] - start[1]) / 1e3 / packets,
            "cpu_share": (end[1] - start[1]) / 1e9 / wall,
            "process_cpu_us_per_packet": (end[2] - start[2]) / 1e3 / packets,
            "process_cpu_share": (end[2] - start[2]) / 1e9 / wall,
            "system_cpu_share": (end[4] - start[4]) / 1e9 / wall,
        }


def _busy_ns() -> int:
    """CPU time all CPUs spent busy so far (/proc/stat, 10 ms ticks): with the window's
    process and sender CPU it shows how much else ran on the machine meanwhile."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) * 1_000_000_000 // _TICKS


_TICKS = os.sysconf("SC_CLK_TCK")


def sched_label(state: int, rt_priority: int) -> str:
    """A native receiver thread's scheduling (``Ingest.sched()``), for the report."""
    return {1: f"SCHED_FIFO {rt_priority}", 0: "normal"}.get(
        state, f"normal (SCHED_FIFO {rt_priority} refused: {state})"
    )


def _bind(rcvbuf: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE (CAP_NET_ADMIN)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind(("127.0.0.1", 0))
    return s


class _Affinity:
    """Pins the calling (main) thread, and puts back what it had."""

    def __init__(self) -> None:
        self.saved: set[int] | None = None

    def pin(self, cpus: set[int] | frozenset[int]) -> None:
        if self.saved is None:
            self.saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)

    def restore(self) -> None:
        if self.saved is not None:
            os.sched_setaffinity(0, self.saved)
            self.saved = None


# ---- native ------------------------------------------------------------------------------


class NativeReceiver(Receiver):
    def __init__(
        self,
        streams: int,
        *,
        shared: bool,
        batch: int,
        coalesce_us: int,
        pin: Pinning | None,
        rt_priority: int = 0,
        backend: str = "epoll",
        uring_setup: int = 0,
        bare: bool = False,
    ) -> None:
        from native.ingest import Ingest

        self.streams, self.shared, self.coalesce_us, self.pin = streams, shared, coalesce_us, pin
        self.rt_priority, self.bare = rt_priority, bare
        self.ing = Ingest(
            streams,
            batch=batch,
            max_batches=max(1, DRAIN_PER_WAKEUP // batch),
            coalesce_us=coalesce_us,
            max_sockets=1,
            cpu=pin.receiver_cpu if pin else None,
            rt_priority=rt_priority,
            backend=backend,
            uring_setup=uring_setup,
            discard=bare,
        )
        self.backend, reason = self.ing.backend()
        if self.backend != backend:
            raise RuntimeError(f"ingest backend {backend} refused: {reason}")
        self.leg: LegOptions = {"min_delay_ms": 40, "max_delay_ms": 200}
        self.ids: list[int] = []
        if shared:
            self.socket_id = self.ing.add_socket(0)
        else:
            self.ids = [self.ing.add_stream(0, **self.leg) for _ in range(streams)]
        self.pull_cpu_ns = 0
        self.pulls = 0
        self.affinity = _Affinity()

    def addresses(self) -> list[Address]:
        if self.shared:
            return [self.ing.socket_address(self.socket_id)] * self.streams
        return [self.ing.local_address(i) for i in self.ids]

    def attach(self, sources: list[Address]) -> None:
        if self.shared:
            self.ids = [
                self.ing.add_stream_shared(self.socket_id, expected_source=src, **self.leg)
                for src in sources
            ]
        if self.pin:
            self.affinity.pin(self.pin.other_cpus)  # the pull loop: off the receiver's CPU
        self.ing.start()
        if self.ing.backend()[0] != self.backend:
            raise RuntimeError(f"ingest backend changed at start: {self.ing.backend()[1]}")
        self.sched = self.ing.sched()
        self.counters0 = self.ing.counters()

    def run_until(self, done: Callable[[], bool], window: Window) -> None:
        for _ in ptime_ticks():
            c0 = time.thread_time_ns()
            self.ing.pull_all(time.monotonic_ns())
            self.pull_cpu_ns += time.thread_time_ns() - c0
            self.pulls += 1
            window.tick(self)
            if done():
                return

    def received(self) -> list[int]:
        return [int(self.ing.stream_counters(i)["datagrams"]) for i in self.ids]

    def received_total(self) -> int:
        return int(self.ing.counters()["datagrams"])

    def cpu_ns(self) -> int:
        return self.ing.thread_cpu_ns()

    def report(self) -> dict[str, Any]:
        mode = "one shared socket" if self.shared else "one socket per leg"
        how = (
            "io_uring multishot recvmsg + provided buffers"
            if self.backend == "io_uring"
            else "epoll + recvmmsg"
        )
        work = (
            "received, counted and dropped (the kernel-receive floor: no parse, source "
            "lock or jb insert)"
            if self.bare
            else "parse + source lock + jb insert"
        )
        return {
            "receiver": f"native: C thread, {mode}, {how}, {work}, "
            f"coalesce_us={self.coalesce_us}; CPU = the receiver thread's clock",
            "backend": self.ing.backend()[1],
            "sched": sched_label(self.sched, self.rt_priority),
            "pull_cpu_us_per_stream_frame": self.pull_cpu_ns
            / 1e3
            / max(1, self.pulls * len(self.ids)),
            **ingest_counters_report(self.ing, self.counters0, self.backend),
        }

    def close(self) -> None:
        self.ing.close()
        self.affinity.restore()


def ptime_ticks() -> Iterator[None]:
    """One step every 20 ms on the monotonic clock: the playout cadence the native
    receivers' loops keep (a late step is run at once, not skipped)."""
    tick = time.monotonic_ns()
    while True:
        tick += 20_000_000
        delay = tick - time.monotonic_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        yield


def ingest_counters_report(ing: Any, counters0: dict[str, Any], backend: str) -> dict[str, Any]:
    """What a native ingest's counters say since ``counters0`` (the receiver's start):
    wakeups, batching, pacing, lock waits, unmatched datagrams and the two latency
    histograms; shared by the bench's own native receivers and the bridge's."""
    c = ing.counters()
    delta = {k: c[k] - counters0[k] for k in c if isinstance(c[k], int)}
    wakeups, calls = delta["wakeups"], delta["recvmmsg_calls"]
    return {
        "cqes_per_enter": delta["uring_cqes"] / max(1, delta["uring_enters"])
        if backend == "io_uring"
        else None,
        "uring_enobufs": delta["uring_enobufs"],
        "uring_rearms": delta["uring_rearms"],
        "wakeups": wakeups,
        "recvmmsg_calls": calls,
        "datagrams_per_wakeup": delta["datagrams"] / max(1, wakeups),
        "datagrams_per_recvmmsg": delta["datagrams"] / max(1, calls)
        if backend == "epoll"
        else None,
        "paced_sleeps": delta["paced_sleeps"],
        "stream_lock_waits": delta["stream_lock_waits"],
        "unmatched": delta["unmatched"],
        "latency": histogram_summary(
            ing.latency(),
            "kernel SO_TIMESTAMPNS -> the datagram inserted in its jitter buffer",
        ),
        "processing": histogram_summary(
            ing.processing(),
            "recvmmsg returned -> the datagram inserted in its jitter buffer",
        ),
    }


def histogram_summary(h: Any, definition: str) -> dict[str, Any]:
    """p50/p90/p99/p99.9 (bucket upper edges: 1 µs below 1 ms, then powers of two) in µs."""
    out: dict[str, Any] = {"definition": definition, "unit": "us", "n": h.count}
    out["mean"] = h.sum_ns / h.count / 1e3 if h.count else None
    for q, key in ((50, "p50"), (90, "p90"), (99, "p99"), (99.9, "p99.9")):
        out[key] = h.percentile_ns(q) / 1e3 if h.count else None  # none: no NaN in JSON
    out["max"] = h.max_ns / 1e3
    out["negative"] = h.negative
    return out


# ---- asyncio baseline ------------------------------------------------------------------


class _Proto(asyncio.DatagramProtocol):
    """Parse the RTP header in Python, append to the leg's deque (per-leg socket: the
    protocol's own leg; shared socket: the leg its source address names)."""

    def __init__(self, rx: AsyncioReceiver, index: int | None) -> None:
        self.rx, self.index = rx, index

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        now = time.monotonic_ns()
        index = self.index
        if index is None:
            index = self.rx.leg_of.get(addr)
            if index is None:
                self.rx.unmatched += 1
                return
        if len(data) < 20:
            return
        first, _pt, seq, ts, _ssrc = _RTP.unpack_from(data)
        if first >> 6 != 2:
            return
        self.rx.queues[index].append((seq, ts, data[12:], now))
        self.rx.counts[index] += 1
        self.rx.latency.append(now - _SENT_AT.unpack_from(data, 12)[0])


class AsyncioReceiver(Receiver):
    def __init__(self, streams: int, *, shared: bool, pin: Pinning | None) -> None:
        self.shared, self.pin = shared, pin
        self.socks = [_bind(4 << 20) for _ in range(1 if shared else streams)]
        self.streams = streams
        self.counts = [0] * streams
        self.queues: list[collections.deque[tuple[int, int, bytes, int]]] = [
            collections.deque() for _ in range(streams)
        ]
        self.leg_of: dict[tuple[str, int], int] = {}
        self.unmatched = 0
        self.latency = array("q")
        self.affinity = _Affinity()

    def addresses(self) -> list[Address]:
        if self.shared:
            return [self.socks[0].getsockname()[:2]] * self.streams
        return [s.getsockname()[:2] for s in self.socks]

    def attach(self, sources: list[Address]) -> None:
        self.leg_of = {(str(h), int(p)): i for i, (h, p) in enumerate(sources)}
        if self.pin:
            self.affinity.pin({self.pin.receiver_cpu})  # the event loop is the receiver

    def run_until(self, done: Callable[[], bool], window: Window) -> None:
        asyncio.run(self._main(done, window))

    async def _main(self, done: Callable[[], bool], window: Window) -> None:
        loop = asyncio.get_running_loop()
        transports = []
        for i, s in enumerate(self.socks):
            proto = _Proto(self, None if self.shared else i)
            transport, _ = await loop.create_datagram_endpoint(
                functools.partial(_same, proto), sock=s
            )
            transports.append(transport)
        while True:
            await asyncio.sleep(0.02)
            for queue in self.queues:  # the consumer side: take what arrived
                queue.clear()
            window.tick(self)
            if done():
                break
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
        mode = "one shared socket, legs by source address" if self.shared else "per socket"
        return {
            "receiver": f"asyncio: DatagramProtocol {mode}, struct parse, deque append; "
            "CPU = the process's clock",
            "unmatched": self.unmatched,
            "latency": latency,
        }

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.affinity.restore()


def _same(proto: _Proto) -> _Proto:
    return proto
