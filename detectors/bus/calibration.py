"""Threshold calibration from stored scores and analysts' labels (issue 10).

The data: the scores stream (every window of every analysed call, ``ScoreUpdate``), the
alert stream (which calls alerted) and the analysts' labels (``dash:labels``: one per
alert, ``true_positive`` or ``false_positive``). A call is

- fraud when any of its alerts was labelled a true positive (for the dimensions of
  those alerts);
- genuine when its alerts were labelled false positives only, or when it never alerted
  (one fraud call in a few thousand: an unalerted call counts as genuine);
- unreviewed, and left out, when it alerted and nobody labelled it (``unlabelled``
  ``"genuine"`` counts those as genuine instead).

``calibrate`` picks, per dimension, the lowest threshold at which the current N-of-M
rule, replayed over each genuine call's stored score sequence, raises at most the
target number of alerts per 1,000 genuine calls; the miss rate on the labelled fraud
calls of that dimension is reported beside it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from detectors.alert_schema import Alert, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.policy import DimensionPolicy, PolicyBody, Scope
from detectors.bus.policy_sim import CallScores, Window, alert_score, alerts_on

Unlabelled = Literal["exclude", "genuine"]


@dataclass
class Dataset:
    """Labelled calls with their score sequences."""

    genuine: dict[str, dict[Dimension, list[Window]]] = field(default_factory=dict)
    fraud: dict[str, dict[Dimension, list[Window]]] = field(default_factory=dict)
    fraud_dims: dict[str, set[Dimension]] = field(default_factory=dict)
    unreviewed: int = 0
    scores_read: int = 0
    unreadable: int = 0
    truncated: bool = False

    def fraud_of(self, dim: Dimension) -> list[CallScores]:
        return [s for c, s in self.fraud.items() if dim in self.fraud_dims.get(c, set())]

    def counts(self) -> dict[str, object]:
        return {
            "genuine_calls": len(self.genuine),
            "fraud_calls": len(self.fraud),
            "unreviewed_calls_left_out": self.unreviewed,
            "scores_read": self.scores_read,
            "unreadable_entries": self.unreadable,
            "truncated": self.truncated,
        }


class Collector:
    """Stream entries and label records in, a ``Dataset`` out (pure: no Redis)."""

    def __init__(self) -> None:
        self._scores: dict[str, dict[Dimension, dict[tuple[str, float], Window]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._alerted: set[str] = set()
        self.scores_read = 0
        self.unreadable = 0

    def add_entries(self, entries: Iterable[tuple[Any, Any]]) -> None:
        for _, fields in entries:
            try:
                msg = decode(fields)
            except ValueError:
                self.unreadable += 1
                continue
            if isinstance(msg, ScoreUpdate):
                self.scores_read += 1
                if msg.score is not None:
                    w = Window(msg.window_start_s, msg.score, msg.quality.net_speech_s)
                    self._scores[msg.call_id][msg.dimension][(msg.leg_id, w.start_s)] = w
            elif isinstance(msg, Alert):
                self._alerted.add(msg.call_id)

    def dataset(
        self, labels: Iterable[Mapping[str, Any]], unlabelled: Unlabelled = "exclude"
    ) -> Dataset:
        verdicts: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for rec in labels:
            verdicts[str(rec.get("call_id", ""))].add(
                (str(rec.get("label", "")), str(rec.get("dimension", "")))
            )
        out = Dataset(scores_read=self.scores_read, unreadable=self.unreadable)
        for call_id, dims in self._scores.items():
            seq = {d: sorted(ws.values(), key=lambda w: w.start_s) for d, ws in dims.items()}
            marks = verdicts.get(call_id, set())
            fraud = {d for label, d in marks if label == "true_positive"}
            if fraud:
                out.fraud[call_id] = seq
                out.fraud_dims[call_id] = {Dimension(d) for d in fraud if d in set(Dimension)}
            elif marks or call_id not in self._alerted or unlabelled == "genuine":
                out.genuine[call_id] = seq
            else:
                out.unreviewed += 1
        return out


def parse_labels(raw: Iterable[Any]) -> list[dict[str, Any]]:
    """HVALS of ``dash:labels``; records that do not parse are skipped."""
    out = []
    for body in raw:
        try:
            rec = json.loads(body)
        except (ValueError, TypeError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


@dataclass(frozen=True)
class DimensionResult:
    dimension: Dimension
    current_threshold: float
    threshold: float
    reachable: bool  # False: no threshold <= 1 meets the target
    false_alerts_per_1000: float | None
    current_false_alerts_per_1000: float | None
    fraud_calls: int
    miss_rate: float | None
    current_miss_rate: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "dimension": self.dimension.value,
            "current_threshold": self.current_threshold,
            "threshold": self.threshold,
            "target_reachable": self.reachable,
            "false_alerts_per_1000_genuine": self.false_alerts_per_1000,
            "current_false_alerts_per_1000_genuine": self.current_false_alerts_per_1000,
            "fraud_calls": self.fraud_calls,
            "miss_rate": self.miss_rate,
            "current_miss_rate": self.current_miss_rate,
        }


def with_threshold(rule: DimensionPolicy, threshold: float) -> DimensionPolicy:
    release = rule.release if rule.release is not None and rule.release <= threshold else None
    return rule.model_copy(update={"threshold": threshold, "release": release})


def _rates(
    genuine: list[CallScores], fraud: list[CallScores], dim: Dimension, rule: DimensionPolicy
) -> tuple[float | None, float | None]:
    alerts = sum(alerts_on(c.get(dim, ()), rule) for c in genuine)
    fa = 1000.0 * alerts / len(genuine) if genuine else None
    hits = sum(1 for c in fraud if alerts_on(c.get(dim, ()), rule))
    return fa, (1.0 - hits / len(fraud)) if fraud else None


def calibrate_dimension(
    data: Dataset, dim: Dimension, rule: DimensionPolicy, target_per_1000: float
) -> DimensionResult:
    genuine: list[CallScores] = list(data.genuine.values())
    fraud = data.fraud_of(dim)
    # the first alert of a genuine call comes at every threshold up to its alert score:
    # candidates are just above those scores (0.001 steps), the lowest first
    scores = sorted(alert_score(c.get(dim, ()), rule) for c in genuine)
    candidates = sorted(
        {0.0} | {min(1.0, math.floor(s * 1000.0 + 1.0) / 1000.0) for s in scores if s > -math.inf}
    )
    chosen, reachable = 1.0, False
    for t in candidates:
        fa, _ = _rates(genuine, [], dim, with_threshold(rule, t))
        if fa is None or fa <= target_per_1000:
            chosen, reachable = t, True
            break
    new = with_threshold(rule, chosen)
    fa, miss = _rates(genuine, fraud, dim, new)
    cur_fa, cur_miss = _rates(genuine, fraud, dim, rule)
    return DimensionResult(
        dim, rule.threshold, chosen, reachable, fa, cur_fa, len(fraud), miss, cur_miss
    )


def calibrate(
    data: Dataset,
    policy: PolicyBody,
    target_per_1000: float,
    dimensions: Iterable[Dimension],
    scope: Scope | None = None,
) -> tuple[PolicyBody, list[DimensionResult]]:
    """The calibrated policy (``policy`` with each dimension's threshold replaced at the
    top level) and what it does, per dimension."""
    rules = policy.resolve(scope)
    results = [calibrate_dimension(data, d, rules[d], target_per_1000) for d in dimensions]
    table = dict(policy.dimensions)
    for r in results:
        table[r.dimension] = with_threshold(rules[r.dimension], r.threshold)
    return policy.model_copy(update={"dimensions": table}), results
