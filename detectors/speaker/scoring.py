"""Speaker scoring maths, pure numpy (DESIGN §5 known_fraudster / voice_mismatch).

- ``aggregate``: one call-level embedding from window embeddings, weighted by each
  window's net speech, L2-normalised.
- ``Cohort``: an impostor cohort (G.711 speech of speakers kept out of evaluation)
  whose cosine statistics normalise scores: symmetric S-norm,
  ``½·((s − μ_e)/σ_e + (s − μ_p)/σ_p)``, with μ/σ of the entry's and the probe's
  cosines against the cohort's top-k closest members (adaptive S-norm).
- ``Calibration``: S-normed *impostor* scores among the cohort's own speakers
  (leave-one-speaker-out): their mean and spread, and an exponential fit of their
  upper tail (peaks over the ``TAIL_SHARE`` quantile: ``q(t) = p·exp(−(t − u)/β)``,
  a generalised Pareto tail with shape 0). ``threshold_for_size`` derives the S-norm
  threshold that keeps the per-call false-match rate of an N-entry watchlist at a
  target, with independent impostor scores: ``P(max of N ≥ t) = 1 − (1 − q)^N``, q
  from the fitted tail (the Gaussian of mean/spread only for a cohort file without
  one: it underestimates the tail, issue 10). ``callshield eval --watchlist-sizes``
  measures how well that holds.
- ``to_unit``: S-norm → [0, 1] for fusion, a logistic with the chosen threshold at 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

SLOPE = 2.0  # logistic slope of to_unit per S-norm unit: +0.69 above threshold -> 0.8
MIN_SD = 1e-3
TAIL_SHARE = 0.05  # the impostor tail fitted: scores above this upper quantile


def l2_normalise(x: FloatArray) -> FloatArray:
    """Rows (or a vector) scaled to unit length; all-zero rows stay zero."""
    x = np.asarray(x, np.float32)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    out: FloatArray = (x / np.maximum(norm, 1e-12)).astype(np.float32)
    return out


def aggregate(embeddings: FloatArray, weights: npt.ArrayLike | None = None) -> FloatArray:
    """The call-level embedding: the weighted mean of unit window embeddings, unit length.
    Weights (net speech per window) below zero count as zero; all-zero weights: plain mean."""
    e = l2_normalise(np.asarray(embeddings, np.float32).reshape(-1, embeddings.shape[-1]))
    if e.shape[0] == 0:
        raise ValueError("aggregate needs at least one embedding")
    w = np.ones(e.shape[0]) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if w.shape[0] != e.shape[0]:
        raise ValueError(f"{w.shape[0]} weights for {e.shape[0]} embeddings")
    w = np.clip(w, 0.0, None)
    if not w.sum() > 0:
        w = np.ones_like(w)
    mean = (w[:, None] * e).sum(axis=0) / w.sum()
    return l2_normalise(mean.astype(np.float32))


@dataclass(frozen=True, slots=True)
class Calibration:
    """S-normed impostor scores: mean, spread, how many trials they came from, and the
    exponential fit of their upper tail (``tail_share`` of them above ``tail_u``, mean
    excess ``tail_beta``; share 0: no tail fitted, the Gaussian is used)."""

    mean: float = 0.0
    sd: float = 1.0
    trials: int = 0
    tail_u: float = 0.0
    tail_beta: float = 0.0
    tail_share: float = 0.0

    def false_match(self, t: float) -> float:
        """P(one impostor score ≥ t)."""
        if self.tail_share > 0.0 and t >= self.tail_u:
            return self.tail_share * math.exp(-(t - self.tail_u) / self.tail_beta)
        return 1.0 - NormalDist(self.mean, self.sd).cdf(t)


@dataclass(frozen=True, slots=True)
class Cohort:
    embeddings: FloatArray  # [K, D], unit rows
    top_k: int = 200
    calibration: Calibration = Calibration()

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] < 2:
            raise ValueError("a cohort needs at least 2 embeddings [K, D]")

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def stats(self, x: FloatArray) -> tuple[F64, F64]:
        """(μ, σ) of each row of ``x`` [B, D] against its top-k cohort cosines."""
        s = np.asarray(x, np.float32).reshape(-1, self.dim) @ self.embeddings.T
        k = min(self.top_k, s.shape[1])
        if k < s.shape[1]:
            s = -np.partition(-s, k - 1, axis=1)[:, :k]
        s64 = s.astype(np.float64)
        return s64.mean(axis=1), np.maximum(s64.std(axis=1), MIN_SD)


def s_norm(raw: F64, entry: tuple[F64, F64], probe: tuple[float, float]) -> F64:
    """Symmetric S-norm of raw cosines ``raw`` [N] (one probe against N entries)."""
    mu_e, sd_e = entry
    mu_p, sd_p = probe
    result: F64 = 0.5 * ((raw - mu_e) / sd_e + (raw - mu_p) / sd_p)
    return result


def threshold_for_size(size: int, target_rate: float, calibration: Calibration) -> float:
    """The S-norm threshold at which an N-entry watchlist falsely matches a caller who
    is not on it with probability ``target_rate`` (per call): from the fitted
    exponential tail where the calibration has one and the per-entry rate lies in it,
    else from the Gaussian of its mean and spread."""
    if not 0.0 < target_rate < 1.0:
        raise ValueError("target_rate must be in (0, 1)")
    n = max(1, size)
    q = -math.expm1(math.log1p(-target_rate) / n)  # 1 - (1 - r)^(1/n), accurate for small r
    c = calibration
    if 0.0 < q < c.tail_share:
        return c.tail_u + c.tail_beta * math.log(c.tail_share / q)
    return c.mean + c.sd * NormalDist().inv_cdf(1.0 - q)


def gaussian_threshold_for_size(size: int, target_rate: float, calibration: Calibration) -> float:
    """The threshold the Gaussian model alone gives (for comparison in evaluations)."""
    c = calibration
    return threshold_for_size(size, target_rate, Calibration(c.mean, c.sd, c.trials))


def fit(scores: npt.ArrayLike, tail_share: float = TAIL_SHARE) -> Calibration:
    """Mean, spread and the exponential upper tail of impostor scores (at least 10
    scores in the tail; fewer: no tail)."""
    a = np.sort(np.asarray(scores, np.float64))[::-1]
    if a.size < 2:
        raise ValueError("calibration needs at least 2 impostor scores")
    m = int(tail_share * a.size)
    mean, sd = float(a.mean()), max(float(a.std()), MIN_SD)
    if m < 10:
        return Calibration(mean, sd, int(a.size))
    u = float(a[m])
    beta = max(float((a[:m] - u).mean()), MIN_SD)
    return Calibration(mean, sd, int(a.size), u, beta, m / a.size)


def to_unit(score: float, threshold: float, slope: float = SLOPE) -> float:
    """S-norm → [0, 1]: 0.5 at ``threshold``, rising with ``slope`` per S-norm unit."""
    x = max(-60.0, min(60.0, slope * (score - threshold)))
    return 1.0 / (1.0 + math.exp(-x))


def calibrate(cohort_embeddings: FloatArray, speakers: list[str], top_k: int = 200) -> Calibration:
    """S-normed impostor scores among the cohort's own embeddings, each pair of different
    speakers normalised against the cohort minus both speakers (leave-speakers-out)."""
    e = l2_normalise(cohort_embeddings)
    spk = np.asarray(speakers)
    if e.shape[0] != spk.shape[0]:
        raise ValueError("one speaker id per cohort embedding")
    raw = (e @ e.T).astype(np.float64)
    n = e.shape[0]
    mus = np.zeros((n, n))
    sds = np.ones((n, n))
    # per embedding i and excluded speaker b: stats of i against the cohort without i's
    # and b's speaker (top-k); computed per (i, speaker b) pair and broadcast
    uniq = sorted(set(speakers))
    for i in range(n):
        for b in uniq:
            keep = (spk != spk[i]) & (spk != b)
            s = raw[i, keep]
            if s.size < 2:
                continue
            k = min(top_k, s.size)
            top = -np.partition(-s, k - 1)[:k]
            cols = spk == b
            mus[i, cols] = top.mean()
            sds[i, cols] = max(float(top.std()), MIN_SD)
    scores = []
    for i in range(n):
        for j in range(i + 1, n):
            if spk[i] == spk[j]:
                continue
            r = raw[i, j]
            scores.append(0.5 * ((r - mus[j, i]) / sds[j, i] + (r - mus[i, j]) / sds[i, j]))
    if len(scores) < 2:
        raise ValueError("calibration needs at least 2 cohort speakers")
    return fit(scores)
