"""Seeded user-space network impairment relay for UDP (there is no tc netem here).

A pure core, :class:`Impairment`, decides for packet *i* (arrival order at the relay)
when each copy of it leaves: no copy (lost), one, or two (duplicated), each with its own
delay (base delay + jitter, plus a hold-back for reordering). Losses are Bernoulli, or
bursty with a Gilbert–Elliott two-state chain. Decisions depend only on the seed and the
packet index, so a run is reproducible. :class:`ImpairRelay` is the socket shell: it
listens on a UDP port, schedules each copy, sends it to the forward address from the
listening socket, and logs the order it actually sent in, so tests compare a receiver's
counters with what really happened on the wire (:func:`order_stats`).

    python -m sip_bridge.impair --forward 127.0.0.1:40000 --loss 0.02 --seed 7
"""

from __future__ import annotations

import argparse
import heapq
import logging
import math
import random
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

__all__ = ["Decision", "ImpairRelay", "Impairment", "ImpairmentConfig", "order_stats"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ImpairmentConfig:
    """What to do to the packets. Probabilities in [0, 1], times in seconds."""

    seed: int = 0
    loss: float = 0.0  # Bernoulli loss probability (in the good state)
    burst_enter: float = 0.0  # Gilbert–Elliott: P(good -> bad) per packet; 0 = no bursts
    burst_exit: float = 0.5  # P(bad -> good) per packet
    burst_loss: float = 1.0  # loss probability in the bad state
    duplicate: float = 0.0  # probability a packet is sent twice
    duplicate_gap: float = 0.001  # the copy leaves this long after the original
    reorder: float = 0.0  # probability a packet is held back (later ones overtake it)
    reorder_delay: float = 0.05  # extra delay of a held-back packet
    delay: float = 0.0  # base one-way delay
    jitter: float = 0.0  # uniform: [0, jitter]; exponential: mean jitter (cut at 10x)
    jitter_dist: Literal["uniform", "exponential"] = "uniform"

    def __post_init__(self) -> None:
        for name in ("loss", "burst_enter", "burst_exit", "burst_loss", "duplicate", "reorder"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        for name in ("duplicate_gap", "reorder_delay", "delay", "jitter"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Decision:
    """Fate of one packet: one delay per copy sent (empty: lost)."""

    delays: tuple[float, ...]
    burst: bool = False  # decided in the Gilbert–Elliott bad state
    held: bool = False  # held back for reordering

    @property
    def lost(self) -> bool:
        return not self.delays


class Impairment:
    """The pure, seeded decision core. decide(i) is a function of (config, i) only."""

    def __init__(self, config: ImpairmentConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._bad = False
        self._decisions: list[Decision] = []

    def decide(self, index: int) -> Decision:
        """Decision for the index-th packet (0-based); earlier ones are computed as needed."""
        if index < 0:
            raise ValueError(f"packet index must be >= 0, got {index}")
        while len(self._decisions) <= index:
            self._decisions.append(self._next())
        return self._decisions[index]

    def _jitter(self, u: float) -> float:
        c = self.config
        if c.jitter_dist == "uniform":
            return u * c.jitter
        # inverse CDF of the exponential, cut at 10 means so one draw cannot stall a run
        return min(-c.jitter * _log1m(u), 10.0 * c.jitter)

    def _next(self) -> Decision:
        c = self.config
        # a fixed number of draws per packet keeps later decisions independent of branches
        u_state, u_loss, u_dup, u_hold, u_j1, u_j2 = (self._rng.random() for _ in range(6))
        if c.burst_enter > 0.0:
            self._bad = u_state >= c.burst_exit if self._bad else u_state < c.burst_enter
        p_loss = c.burst_loss if self._bad else c.loss
        if u_loss < p_loss:
            return Decision((), burst=self._bad)
        held = u_hold < c.reorder
        first = c.delay + self._jitter(u_j1) + (c.reorder_delay if held else 0.0)
        delays: tuple[float, ...] = (first,)
        if u_dup < c.duplicate:
            delays = (first, first + c.duplicate_gap + self._jitter(u_j2))
        return Decision(delays, burst=self._bad, held=held)

    def plan(self, n: int) -> list[Decision]:
        return [self.decide(i) for i in range(n)]


def _log1m(u: float) -> float:
    return math.log1p(-u) if u < 1.0 else -745.0


def order_stats(sent: Sequence[int], received: int | None = None) -> dict[str, int]:
    """Classify a send log (packet indices in the order they left) like a receiver would:
    first copies in order or reordered (below the highest already sent), later copies
    duplicates, indices never sent below the highest one lost (RFC 3550 style)."""
    seen: set[int] = set()
    highest = -1
    in_order = reordered = duplicates = 0
    for idx in sent:
        if idx in seen:
            duplicates += 1
            continue
        seen.add(idx)
        if idx < highest:
            reordered += 1
        else:
            in_order += 1
            highest = idx
    top = highest + 1 if received is None else received
    return {
        "sent": len(sent),
        "in_order": in_order,
        "reordered": reordered,
        "duplicates": duplicates,
        "lost": top - len(seen),
    }


class ImpairRelay:
    """UDP relay applying an :class:`Impairment` between a listen and a forward address."""

    def __init__(
        self,
        config: ImpairmentConfig,
        forward: tuple[str, int],
        listen: tuple[str, int] = ("127.0.0.1", 0),
    ) -> None:
        self.model = Impairment(config)
        self.forward = forward
        self.sent_log: list[int] = []  # packet index of every datagram sent, in order
        self.received = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(listen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="impair-relay", daemon=True)
        self._lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        """Where senders should send (the relay's listening address)."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._sock.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def counts(self) -> dict[str, int]:
        """What the relay did so far: the model's decisions and the actual send order."""
        with self._lock:
            sent, received = list(self.sent_log), self.received
        decisions = [self.model.decide(i) for i in range(received)]
        stats = order_stats(sent, received)
        stats.update(
            received=received,
            dropped=sum(d.lost for d in decisions),
            dropped_in_burst=sum(d.lost and d.burst for d in decisions),
            duplicated=sum(len(d.delays) > 1 for d in decisions),
            held=sum(d.held for d in decisions),
        )
        return stats

    def _run(self) -> None:
        queue: list[tuple[float, int, int, bytes]] = []  # (due, tiebreak, index, datagram)
        tiebreak = 0
        while not self._stop.is_set():
            now = time.monotonic()
            wait = 0.02 if not queue else max(0.0, min(queue[0][0] - now, 0.02))
            self._sock.settimeout(wait if wait > 0 else 0.0)
            try:
                data = self._sock.recv(65535)
            except (BlockingIOError, TimeoutError):
                data = None
            now = time.monotonic()
            if data is not None:
                with self._lock:
                    index = self.received
                    self.received += 1
                for delay in self.model.decide(index).delays:
                    heapq.heappush(queue, (now + delay, tiebreak, index, data))
                    tiebreak += 1
            while queue and queue[0][0] <= now:
                _, _, index, datagram = heapq.heappop(queue)
                # logged before the send: a receiver can count a datagram before this
                # thread runs again, and must never see one that the log lacks
                with self._lock:
                    self.sent_log.append(index)
                try:
                    self._sock.sendto(datagram, self.forward)
                except OSError as exc:
                    with self._lock:
                        self.sent_log.pop()  # this thread's own entry: the only appender
                    log.debug("impair relay send failed: %s", exc)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sip_bridge.impair", description=__doc__)
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 0))
    parser.add_argument("--forward", type=_address, required=True)
    for field in ImpairmentConfig.__dataclass_fields__.values():
        if field.name != "jitter_dist":
            kind = int if field.name == "seed" else float
            parser.add_argument(
                f"--{field.name.replace('_', '-')}", type=kind, default=field.default
            )
    parser.add_argument("--jitter-dist", choices=["uniform", "exponential"], default="uniform")
    args = parser.parse_args(argv)
    names = ImpairmentConfig.__dataclass_fields__
    config = ImpairmentConfig(**{name: getattr(args, name) for name in names})
    with ImpairRelay(config, args.forward, args.listen) as relay:
        print(f"relaying {relay.address} -> {args.forward}; Ctrl-C prints the counts")
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        print(relay.counts())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
