"""Admission and backpressure: how many calls this node can analyse, and what happens to
the next one when it is full (DESIGN §8).

Capacity is the smaller of a configured ceiling and an estimate from measurement: each
detector's cost per window (an EWMA of batch run time / batch size, in worker-seconds)
times the windows per second one call asks of it (the hop grid plus, for the dimensions
windowed at utterance ends too, the measured share of extra end windows), against
``workers × utilisation``, and each detector's alone against ``min(its lane's
max_inflight, workers) × utilisation`` (a lane never runs more batches at once).
Before any call the estimate is seeded from the pre-warm timings
(``detectors.prewarm_cost``): each detector's cost per window measured with the whole
pool busy, which is what a window costs once the node is full, times ``seed_margin`` for
the rest of the process the pre-warm cannot see. A cost measured later on a quiet pool
(fewer batches running at once than the pool can) is scaled by the same ratio (seed /
alone, at that batch size) before it enters the EWMA, so
light traffic does not talk the estimate down to the uncontended cost and a dialer burst
on a node that has seen one call is not admitted whole. Calls are judged one at a time:
each admitted call counts against the capacity at once, so a burst arriving in one tick
gets exactly what is left.
The node is also over capacity while its queue wait exceeds the limit: the p99 of the
waits observed in the last ``wait_horizon_s`` (older samples expire, so an idle node's
door reopens; a burst does not close it for good), or the age of the oldest window
queued now (a stalled queue closes it even when no batch finishes; an empty queue
waits 0).
Over capacity, a new call is refused (``refuse``: the bridge answers 503) or admitted
unanalysed (``shed``: SIPREC still gets its 200, the call is marked
``unanalyzed:capacity``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from detectors.metrics import DetectorMetrics
from detectors.prewarm_cost import PrewarmCosts

# seed_margin's allowed range: below 1 the seed would undercut the pre-warm's own
# full-pool cost; past 4 (measured need here 1.18-1.36) it is most likely a typo (12 for
# 1.2) that would throw away three quarters of the node's capacity or more
SEED_MARGIN_MIN = 1.0
SEED_MARGIN_MAX = 4.0


def check_seed_margin(value: float) -> float:
    """``value`` when it is a usable seed margin, else ValueError saying why."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"seed margin must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or not SEED_MARGIN_MIN <= value <= SEED_MARGIN_MAX:
        raise ValueError(
            f"seed margin {value!r} is outside {SEED_MARGIN_MIN}-{SEED_MARGIN_MAX}: it "
            "multiplies the pre-warm's full-pool cost per window to seed the capacity "
            "estimate (1.0 = the pre-warm's cost as measured, 1.2 = 20 % for the rest "
            "of the process)"
        )
    return float(value)


class OverloadPolicy(StrEnum):
    REFUSE = "refuse"
    SHED = "shed"


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    max_calls: int = 1000
    policy: OverloadPolicy = OverloadPolicy.SHED
    workers: int = 2
    utilisation: float = 0.8
    queue_wait_limit_s: float = 0.25
    min_samples: int = 50  # queue waits needed before they can close the door
    wait_horizon_s: float = 5.0  # queue waits older than this no longer count
    # the pre-warm's full-pool costs times this seed the estimate: the rest of the
    # process (playout tick, ingest, VAD gate, publisher) takes CPU the pre-warm cannot
    # see. Measured on the 2-core box with the 8 kHz AASIST set at 40 calls: costs under
    # load 1.18-1.36x the pre-warm's (docs/operations.md, Admission). The bridge's
    # CALLSHIELD_ADMISSION_SEED_MARGIN; SEED_MARGIN_MIN..SEED_MARGIN_MAX (ValueError)
    seed_margin: float = 1.2

    def __post_init__(self) -> None:
        check_seed_margin(self.seed_margin)


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool  # False: refuse the call (503 / Retry-After)
    analysed: bool  # False: accepted but not analysed (unanalyzed:capacity)
    reason: str = ""


class Admission:
    def __init__(
        self,
        config: AdmissionConfig,
        windows_per_call_s: dict[str, float],
        metrics: DetectorMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        queue_age: Callable[[], float] | None = None,
        concurrency: dict[str, int] | None = None,
    ) -> None:
        """``windows_per_call_s``: per detector, windows per second one call produces.
        ``queue_age``: how long the oldest window queued now has waited (0: none queued),
        on ``clock``'s timeline. ``concurrency``: per detector, the batches its lane runs
        at once (``LaneConfig.max_inflight``; absent: the whole pool)."""
        self.config = config
        self._demand = dict(windows_per_call_s)
        self._concurrency = dict(concurrency or {})
        self._cost: dict[str, float] = {}
        self._waits: deque[tuple[float, float]] = deque(maxlen=1000)  # (observed at, wait)
        self._clock = clock
        self._queue_age = queue_age
        self._calls: set[str] = set()
        self._lock = threading.Lock()
        self._metrics = metrics
        self._prewarm: PrewarmCosts | None = None  # the seed: pre-warm costs x margin
        self._measured: PrewarmCosts | None = None  # as timed
        self._seeded: int | None = None

    def _full_pool(self) -> int:
        """Batches at once that make the pool full: its workers, or fewer if the lanes
        together may not run that many."""
        workers = self.config.workers
        if self._concurrency and set(self._concurrency) >= set(self._demand):
            return max(1, min(workers, sum(self._concurrency.values())))
        return max(1, workers)

    def seed(self, costs: PrewarmCosts) -> None:
        """Before any call: each detector's pre-warm cost per window with the pool
        full, times ``seed_margin``, becomes its estimate, and the ratio of that to its
        cost alone scales what a quiet pool measures from then on."""
        margin = self.config.seed_margin
        loaded = {d: c * margin for d, c in costs.loaded.items()}
        with self._lock:
            self._prewarm = replace(costs, loaded=loaded)  # what a full node pays
            self._measured = costs
            self._cost.update(loaded)
            self._seeded = self._capacity() if costs.loaded else None
        self._publish()

    def observe_batch(
        self,
        detector: str,
        size: int,
        run_s: float,
        waits: list[float],
        pool_busy: int | None = None,
    ) -> None:
        """Feed from the scheduler's batch observer. ``pool_busy``: the most batches
        the pool ran at once during this one (None: take the cost as measured)."""
        per_window = run_s / max(1, size)
        with self._lock:
            pw = self._prewarm
            if pw is not None and pool_busy is not None and pool_busy < self._full_pool():
                per_window *= pw.contention(detector, size) or 1.0  # what it costs when full
            old = self._cost.get(detector)
            self._cost[detector] = per_window if old is None else 0.9 * old + 0.1 * per_window
            now = self._clock()
            self._waits.extend((now, w) for w in waits)
        self._publish()

    def capacity(self) -> int:
        with self._lock:
            return self._capacity()

    def _capacity(self) -> int:
        load_per_call = sum(self._demand[d] * c for d, c in self._cost.items() if d in self._demand)
        ceiling = self.config.max_calls
        if load_per_call <= 0:
            return ceiling
        util, workers = self.config.utilisation, self.config.workers
        calls = workers * util / load_per_call
        for d, c in self._cost.items():  # one model gets at most its lane's share
            lane_load = self._demand.get(d, 0.0) * c
            if lane_load > 0 and d in self._concurrency:
                calls = min(calls, min(self._concurrency[d], workers) * util / lane_load)
        return min(ceiling, int(calls))

    def queue_wait(self) -> float:
        """The queue-wait signal admission compares with its limit, s."""
        with self._lock:
            return self._queue_wait()

    def _queue_wait(self) -> float:
        now = self._clock()
        horizon = now - self.config.wait_horizon_s
        while self._waits and self._waits[0][0] < horizon:
            self._waits.popleft()
        live = self._queue_age() if self._queue_age is not None else 0.0
        if len(self._waits) < self.config.min_samples:
            return live
        recent = np.fromiter((w for _, w in self._waits), float, len(self._waits))
        return max(live, float(np.percentile(recent, 99)))

    def snapshot(self) -> dict[str, object]:
        """What admission decides on now: capacity, calls, queue-wait signal, and per
        detector the measured cost per window (worker-s) and windows per call-second."""
        with self._lock:
            return {
                "capacity": self._capacity(),
                "active": len(self._calls),
                "queue_wait_s": self._queue_wait(),
                "cost_per_window_s": dict(self._cost),
                "windows_per_call_s": dict(self._demand),
                "seeded": self._seeded_snapshot(),
            }

    def _seeded_snapshot(self) -> dict[str, object] | None:
        pw = self._measured
        if pw is None:
            return None
        return {
            "capacity": self._seeded,
            "margin": self.config.seed_margin,
            "loaded_cost_per_window_s": dict(pw.loaded),
            "alone_cost_per_window_s": {d: dict(c) for d, c in pw.alone.items()},
            "contention": {
                d: pw.contention(d, max(c)) for d, c in pw.alone.items() if c and d in pw.loaded
            },
        }

    def seeded_capacity(self) -> int | None:
        """The estimate the pre-warm timings gave, before any call (None: not seeded)."""
        with self._lock:
            return self._seeded

    def active(self) -> int:
        """Calls admitted for analysis now."""
        with self._lock:
            return len(self._calls)

    def remaining(self) -> int:
        with self._lock:
            return max(0, self._capacity() - len(self._calls))

    def admit(self, call_id: str) -> Decision:
        with self._lock:
            if call_id in self._calls:
                return Decision(True, True, "already admitted")
            full = len(self._calls) >= self._capacity()
            slow = self._queue_wait() > self.config.queue_wait_limit_s
            if full or slow:
                reason = "capacity" if full else "queue wait over limit"
                policy = self.config.policy
                if self._metrics is not None:
                    self._metrics.calls_refused.labels(policy.value).inc()
                decision = Decision(policy is OverloadPolicy.SHED, False, reason)
            else:
                self._calls.add(call_id)
                decision = Decision(True, True)
        self._publish()
        return decision

    def release(self, call_id: str) -> None:
        with self._lock:
            self._calls.discard(call_id)
        self._publish()

    def _publish(self) -> None:
        if self._metrics is None:
            return
        with self._lock:
            active, cap = len(self._calls), self._capacity()
        self._metrics.calls_active.set(active)
        self._metrics.capacity_remaining.set(max(0, cap - active))
        self._metrics.capacity.set(cap)
        if self._seeded is not None:
            self._metrics.capacity_seeded.set(self._seeded)
