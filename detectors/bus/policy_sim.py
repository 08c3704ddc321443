"""The alert policy replayed over stored scores: what fusion would have raised on a call
(``detectors.fusion``, the same N-of-M opening or single-window bar, per-call cap,
minimum net speech and hysteresis release), in pure Python so the dashboard's what-if
can run it too. A test feeds the same random score sequences to both and compares the
alert counts.

Stored scores carry no early-media mark and no tenant: every call is replayed in the
scope it is given (the default scope unless told otherwise).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from detectors.alert_schema import Dimension
from detectors.bus.policy import DimensionPolicy, PolicyBody, Scope


@dataclass(frozen=True, slots=True)
class Window:
    """One scored window of a call (abstentions are not windows fusion counts)."""

    start_s: float
    score: float
    net_speech_s: float = 0.0


CallScores = Mapping[Dimension, Sequence[Window]]


def alerts_on(windows: Iterable[Window], rule: DimensionPolicy) -> int:
    """How many alerts (episodes) fusion raises on ``windows`` under ``rule``."""
    if not rule.alerting or rule.max_alerts_per_call == 0:
        return 0
    recent: deque[tuple[float, float]] = deque(maxlen=rule.m)
    episodes, open_ = 0, False
    for w in windows:
        if w.net_speech_s < rule.min_net_speech_s:
            continue
        recent.append((w.score, w.net_speech_s))
        if not open_:
            if episodes < rule.max_alerts_per_call and rule.opens(recent):
                open_, episodes = True, episodes + 1
            continue
        if len(recent) == rule.m and all(s < rule.release_threshold for s, _ in recent):
            open_ = False
    return episodes


def alert_score(windows: Iterable[Window], rule: DimensionPolicy) -> float:
    """The highest threshold at which the call still raises its first alert: the
    largest n-th highest score of any M consecutive counted windows, or with a
    single-window share f, the threshold t whose bar t + f (1 - t) the call's highest
    window with enough speech for it reaches, (max - f) / (1 - f), if higher (-inf:
    never)."""
    recent: deque[float] = deque(maxlen=rule.m)
    best = top = -math.inf
    for w in windows:
        if w.net_speech_s < rule.min_net_speech_s:
            continue
        recent.append(w.score)
        if w.net_speech_s >= rule.single_window_min_net_speech_s:
            top = max(top, w.score)
        if len(recent) >= rule.n:
            best = max(best, sorted(recent, reverse=True)[rule.n - 1])
    f = rule.single_window
    if f is not None and top > -math.inf:
        best = max(best, (top - f) / (1.0 - f))
    return best


@dataclass
class Outcome:
    """A policy over a set of labelled calls."""

    genuine_calls: int = 0
    fraud_calls: int = 0
    false_alerts: int = 0  # alerts on genuine calls
    genuine_calls_alerted: int = 0
    fraud_calls_hit: int = 0
    per_dimension: dict[Dimension, dict[str, float]] = field(default_factory=dict)

    @property
    def false_alerts_per_1000(self) -> float | None:
        return 1000.0 * self.false_alerts / self.genuine_calls if self.genuine_calls else None

    @property
    def miss_rate(self) -> float | None:
        if not self.fraud_calls:
            return None
        return 1.0 - self.fraud_calls_hit / self.fraud_calls

    def as_dict(self) -> dict[str, object]:
        return {
            "genuine_calls": self.genuine_calls,
            "fraud_calls": self.fraud_calls,
            "false_alerts": self.false_alerts,
            "false_alerts_per_1000_genuine": self.false_alerts_per_1000,
            "genuine_calls_alerted": self.genuine_calls_alerted,
            "fraud_calls_hit": self.fraud_calls_hit,
            "miss_rate": self.miss_rate,
            "per_dimension": {d.value: v for d, v in sorted(self.per_dimension.items())},
        }


def evaluate(
    policy: PolicyBody,
    genuine: Sequence[CallScores],
    fraud: Sequence[CallScores],
    scope: Scope | None = None,
    dimensions: Iterable[Dimension] | None = None,
) -> Outcome:
    """False alerts on ``genuine`` calls and hits on ``fraud`` calls (a fraud call is hit
    when any of ``dimensions`` alerts) with every call replayed under ``policy``."""
    rules = policy.resolve(scope)
    dims = sorted(set(dimensions) if dimensions is not None else set(Dimension))
    out = Outcome(genuine_calls=len(genuine), fraud_calls=len(fraud))
    per = {d: {"false_alerts": 0.0, "fraud_hits": 0.0} for d in dims}
    for call in genuine:
        n = 0
        for d in dims:
            k = alerts_on(call.get(d, ()), rules[d])
            per[d]["false_alerts"] += k
            n += k
        out.false_alerts += n
        out.genuine_calls_alerted += n > 0
    for call in fraud:
        hit = False
        for d in dims:
            if alerts_on(call.get(d, ()), rules[d]):
                per[d]["fraud_hits"] += 1
                hit = True
        out.fraud_calls_hit += hit
    for d in dims:
        rate = 1000.0 * per[d]["false_alerts"] / len(genuine) if genuine else math.nan
        per[d]["false_alerts_per_1000_genuine"] = rate
        per[d]["threshold"] = rules[d].threshold
    out.per_dimension = per
    return out
