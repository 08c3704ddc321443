"""Equal error rate and operating-point rates for spoof scores (higher = more likely spoof).

A file is *flagged* at threshold ``t`` when its score is ``>= t`` (the fusion's rule).
``false_alarm(t)`` is the share of bona fide files flagged, ``miss(t)`` the share of spoof
files not flagged. Candidate thresholds are every distinct score plus +inf (flag nothing).
The EER is where the two curves cross; between two candidates whose rates straddle the
crossing it is taken on the straight segment joining the two operating points (the ROC
convex-hull / randomised-threshold convention), so ties and tiny sets give one well-defined
number: perfect separation gives 0, all scores equal gives 0.5. The reported threshold is
the candidate whose |false_alarm - miss| is smallest (the lower one on a tie).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class EerResult:
    eer: float
    threshold: float  # may be inf: flag nothing
    false_alarm: float  # at ``threshold``
    miss: float  # at ``threshold``


def rates_at(
    bonafide: Sequence[float], spoof: Sequence[float], threshold: float
) -> tuple[float | None, float | None]:
    """(false-alarm rate on bona fide, miss rate on spoof) at ``threshold``; None for an
    empty side."""
    b, s = np.asarray(bonafide, float), np.asarray(spoof, float)
    fa = float(np.mean(b >= threshold)) if b.size else None
    miss = float(np.mean(s < threshold)) if s.size else None
    return fa, miss


def eer(bonafide: Sequence[float], spoof: Sequence[float]) -> EerResult | None:
    """The equal error rate (None unless both sides have at least one score)."""
    b = np.sort(np.asarray(bonafide, float))
    s = np.sort(np.asarray(spoof, float))
    if not b.size or not s.size:
        return None
    cand = np.append(np.unique(np.concatenate([b, s])), np.inf)
    fa = 1.0 - np.searchsorted(b, cand, side="left") / b.size  # share of b >= t
    miss = np.searchsorted(s, cand, side="left") / s.size  # share of s < t
    diff = fa - miss  # non-increasing in t, from >= 0 (t = min) to <= 0 (t = inf)
    k = int(np.argmax(diff <= 0))  # first candidate where miss caught up with fa
    if diff[k] == 0 or k == 0:
        value = float(fa[k])
    else:
        d0, d1 = diff[k - 1], diff[k]
        w = d0 / (d0 - d1)
        value = float(fa[k - 1] + w * (fa[k] - fa[k - 1]))
    best = int(np.argmin(np.abs(diff)))
    return EerResult(value, float(cand[best]), float(fa[best]), float(miss[best]))
