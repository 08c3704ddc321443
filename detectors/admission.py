"""Admission and backpressure: how many calls this node can analyse, and what happens to
the next one when it is full (DESIGN §8).

Capacity is the smaller of a configured ceiling and an estimate from measurement: each
detector's cost per window (an EWMA of batch run time / batch size, in worker-seconds)
times the windows per second one call asks of it, against ``workers × utilisation``.
The node is also over capacity while the recent p99 queue wait exceeds its limit.
Over capacity, a new call is refused (``refuse``: the bridge answers 503) or admitted
unanalysed (``shed``: SIPREC still gets its 200, the call is marked
``unanalyzed:capacity``).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from detectors.metrics import DetectorMetrics


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
    ) -> None:
        """``windows_per_call_s``: per detector, windows per second one call produces."""
        self.config = config
        self._demand = dict(windows_per_call_s)
        self._cost: dict[str, float] = {}
        self._waits: deque[float] = deque(maxlen=1000)
        self._calls: set[str] = set()
        self._lock = threading.Lock()
        self._metrics = metrics

    def observe_batch(self, detector: str, size: int, run_s: float, waits: list[float]) -> None:
        """Feed from the scheduler's batch observer."""
        per_window = run_s / max(1, size)
        with self._lock:
            old = self._cost.get(detector)
            self._cost[detector] = per_window if old is None else 0.9 * old + 0.1 * per_window
            self._waits.extend(waits)
        self._publish()

    def capacity(self) -> int:
        with self._lock:
            return self._capacity()

    def _capacity(self) -> int:
        load_per_call = sum(self._demand[d] * c for d, c in self._cost.items() if d in self._demand)
        ceiling = self.config.max_calls
        if load_per_call <= 0:
            return ceiling
        budget = self.config.workers * self.config.utilisation
        return min(ceiling, int(budget / load_per_call))

    def _waits_p99(self) -> float:
        if len(self._waits) < self.config.min_samples:
            return 0.0
        return float(np.percentile(np.fromiter(self._waits, float), 99))

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
            slow = self._waits_p99() > self.config.queue_wait_limit_s
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
