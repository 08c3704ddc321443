"""When a delivery is tried: a real-time lane (a few tries within seconds, short
timeout) then a durable lane (Standard Webhooks' schedule over about three days, with
jitter), then the dead-letter list. Time comes from a ``Clock`` so tests can run days
of the durable lane in a moment (``VirtualClock``)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

Lane = Literal["realtime", "durable"]

# seconds after the previous attempt; first attempt immediately
REALTIME_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0)
DURABLE_DELAYS: tuple[float, ...] = (
    *(5 * 60.0, 30 * 60.0, 2 * 3600.0, 5 * 3600.0, 10 * 3600.0),
    *(14 * 3600.0, 20 * 3600.0, 24 * 3600.0),
)


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    """Wall-clock seconds: shared by every dispatcher through Redis, so not monotonic."""

    def now(self) -> float:
        return time.time()


@dataclass
class VirtualClock:
    t: float = 1_800_000_000.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class RetryPolicy:
    realtime: tuple[float, ...] = REALTIME_DELAYS
    durable: tuple[float, ...] = DURABLE_DELAYS
    jitter: float = 0.1  # +-10 % on durable delays
    realtime_timeout_s: float = 2.0
    durable_timeout_s: float = 15.0
    rng: random.Random = field(default_factory=random.Random)

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.realtime) + len(self.durable)

    def lane(self, attempts_done: int) -> Lane:
        return "realtime" if attempts_done <= len(self.realtime) else "durable"

    def timeout(self, attempts_done: int) -> float:
        if self.lane(attempts_done) == "realtime":
            return self.realtime_timeout_s
        return self.durable_timeout_s

    def delay_after(self, attempts_done: int, retry_after: float | None = None) -> float | None:
        """Seconds until the next attempt after ``attempts_done`` failures; None: give up."""
        i = attempts_done - 1
        if i < len(self.realtime):
            base = self.realtime[i]
        elif i - len(self.realtime) < len(self.durable):
            base = self.durable[i - len(self.realtime)]
            base *= 1 + self.rng.uniform(-self.jitter, self.jitter)
        else:
            return None
        if retry_after is not None:
            base = max(base, min(retry_after, 24 * 3600.0))
        return base
