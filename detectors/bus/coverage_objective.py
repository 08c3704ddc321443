"""Which ended calls were actually covered, and the coverage objective (DESIGN §8:
silent loss of coverage is an alert of its own).

Definition (one place, used by the bridge's ``/metrics``, its objective and
``callshield coverage``): a call *covers* a dimension when its ``ended`` event's
coverage record says the call was analysed and that dimension scored at least one
window and analysed at least ``min_speech_s`` of net speech
(``BusSettings.coverage_min_speech_s``, with per-dimension overrides). A call that was
not analysed (shed for capacity), carried no media, or ended before enough speech is
not covered. A call whose windows of a dimension all abstained as not applicable
(``biometrics_off``, ``no_enrolment``: the tenant's biometrics mode, no claimed account
to verify) does not count for that dimension at all. A dimension's *covered ratio* is
covered calls / ended calls over the node's last ``window_calls`` ended calls.

Objective: once at least ``min_calls`` calls are in the window, a ratio below
``objective`` is *degraded*; it *recovers* when the ratio is back at ``objective +
recover_margin`` (so one call either way does not flap). Each transition is one
``SystemEvent`` (``system.coverage.degraded`` / ``system.coverage.recovered``).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from detectors.alert_schema import (
    Abstention,
    CallCoverage,
    CallEvent,
    CoverageStatus,
    Dimension,
    SystemEvent,
)
from detectors.bus.settings import BusSettings


@dataclass(frozen=True, slots=True)
class CoverageRule:
    """What counts as covered: the minimum net speech analysed, per dimension."""

    min_speech_s: float = 2.0
    by_dimension: Mapping[Dimension, float] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, s: BusSettings) -> CoverageRule:
        return cls(s.coverage_min_speech_s, dict(s.coverage_min_speech_by_dimension))

    def min_speech(self, dimension: Dimension) -> float:
        return self.by_dimension.get(dimension, self.min_speech_s)

    def covered(self, coverage: CallCoverage | None, dimension: Dimension) -> bool:
        if coverage is None or not coverage.analysed:
            return False
        d = coverage.dimensions.get(dimension)
        return (
            d is not None
            and d.scored_windows > 0
            and d.analysed_speech_s >= self.min_speech(dimension)
        )


# abstentions that say a dimension does not apply to the call (the tenant's
# biometrics_mode, no enrolled account to verify against), not that coverage was lost
NOT_APPLICABLE = frozenset({Abstention.BIOMETRICS_OFF, Abstention.NO_ENROLMENT})


def applies(coverage: CallCoverage | None, dimension: Dimension) -> bool:
    """False when every window of ``dimension`` abstained as not applicable: the call
    then does not count for that dimension's objective, either way."""
    d = coverage.dimensions.get(dimension) if coverage is not None else None
    if d is None or d.windows == 0 or d.scored_windows > 0:
        return True
    return not set(d.abstentions) <= NOT_APPLICABLE or sum(d.abstentions.values()) == 0


@dataclass(frozen=True, slots=True)
class Objective:
    objective: float = 0.95
    window_calls: int = 50
    min_calls: int = 20
    recover_margin: float = 0.02

    @classmethod
    def from_settings(cls, s: BusSettings) -> Objective:
        return cls(
            s.coverage_objective,
            s.coverage_window_calls,
            min(s.coverage_min_calls, s.coverage_window_calls),
            s.coverage_recover_margin,
        )


@dataclass(frozen=True, slots=True)
class DimensionWindow:
    calls: int
    covered: int
    degraded: bool

    @property
    def ratio(self) -> float | None:
        return self.covered / self.calls if self.calls else None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters since start and each dimension's window, for ``/metrics``."""

    dimensions: dict[Dimension, DimensionWindow]
    ended: dict[str, int]  # by end reason
    no_media: int
    one_way: int
    shed: int  # ended calls answered but not analysed (``unanalyzed`` set)


class CoverageTracker:
    """Ended calls in, per-dimension windows and transition events out.

    Thread-safe: ``observe`` runs where the bridge publishes call events, ``snapshot``
    on the HTTP thread at scrape time."""

    def __init__(
        self,
        dimensions: Iterable[Dimension],
        node_id: str,
        rule: CoverageRule | None = None,
        objective: Objective | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.rule = rule or CoverageRule()
        self.objective = objective or Objective()
        self.node_id = node_id
        self._clock = clock
        self._lock = threading.Lock()
        n = self.objective.window_calls
        self._windows: dict[Dimension, deque[bool]] = {
            d: deque(maxlen=n) for d in sorted(set(dimensions))
        }
        self._degraded: set[Dimension] = set()
        self._ended: Counter[str] = Counter()
        self._no_media = self._one_way = self._shed = 0

    @property
    def dimensions(self) -> tuple[Dimension, ...]:
        return tuple(self._windows)

    def observe(self, event: CallEvent) -> list[SystemEvent]:
        """Count one call event (only ``ended`` ones matter); the transitions it caused."""
        if event.event != "ended":
            return []
        cov = event.coverage
        out: list[SystemEvent] = []
        with self._lock:
            self._ended[event.reason or "unknown"] += 1
            if cov is not None:
                self._no_media += cov.media == "none"
                self._one_way += cov.media == "one_way"
                self._shed += bool(cov.unanalyzed)
            for dim, window in self._windows.items():
                if not applies(cov, dim):
                    continue  # e.g. voice verification on a call that claims no account
                window.append(self.rule.covered(cov, dim))
                transition = self._transition(dim, window)
                if transition is not None:
                    out.append(self._event(transition, dim, window))
        return out

    def _transition(self, dim: Dimension, window: deque[bool]) -> str | None:
        o = self.objective
        if len(window) < o.min_calls:
            return None
        ratio = sum(window) / len(window)
        if dim not in self._degraded and ratio < o.objective:
            self._degraded.add(dim)
            return "system.coverage.degraded"
        if dim in self._degraded and ratio >= min(1.0, o.objective + o.recover_margin):
            self._degraded.discard(dim)
            return "system.coverage.recovered"
        return None

    def _event(self, kind: str, dim: Dimension, window: deque[bool]) -> SystemEvent:
        covered = sum(window)
        return SystemEvent.model_validate(
            {
                "event_id": "sys_" + uuid.uuid4().hex[:24],
                "type": kind,
                "node_id": self.node_id,
                "at": self._clock(),
                "coverage": CoverageStatus(
                    dimension=dim,
                    covered_ratio=covered / len(window),
                    objective=self.objective.objective,
                    calls=len(window),
                    covered_calls=covered,
                    min_speech_s=self.rule.min_speech(dim),
                ),
            }
        )

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                dimensions={
                    d: DimensionWindow(len(w), sum(w), d in self._degraded)
                    for d, w in self._windows.items()
                },
                ended=dict(self._ended),
                no_media=self._no_media,
                one_way=self._one_way,
                shed=self._shed,
            )


def state_field(event: SystemEvent) -> str:
    """The ``system:state`` hash field an event replaces (its topic, node, subject)."""
    subject = event.coverage.dimension.value if event.coverage is not None else "-"
    topic = event.type.rsplit(".", 1)[0]  # system.coverage
    return f"{topic}:{event.node_id}:{subject}"
