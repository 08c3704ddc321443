"""A tenant's watchlist as an in-memory matrix: 1:N search of one call-level embedding
with S-norm, and the threshold chosen for the watchlist's size (``scoring``).

Built off the scoring path (by the shared state's refresher) and never mutated: a
refresh builds a new index and swaps the reference, so a search never takes a lock and
never waits for Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from detectors.speaker.scoring import (
    F64,
    Cohort,
    FloatArray,
    l2_normalise,
    s_norm,
    threshold_for_size,
)

DEFAULT_TARGET_RATE = 0.001  # per-call false-match rate the threshold aims at (issue 10)


@dataclass(frozen=True, slots=True)
class Match:
    entry_id: str
    score: float  # S-norm of the best entry
    cosine: float
    threshold: float  # S-norm threshold for this watchlist's size


@dataclass(frozen=True, slots=True)
class WatchlistIndex:
    tenant: str
    version: int
    ids: tuple[str, ...]
    matrix: FloatArray  # [N, D] unit rows
    entry_mu: F64
    entry_sd: F64
    threshold: float
    next_expiry: float | None = None  # epoch seconds: rebuild when it passes

    @property
    def size(self) -> int:
        return len(self.ids)

    @classmethod
    def build(
        cls,
        tenant: str,
        version: int,
        ids: Sequence[str],
        embeddings: FloatArray,
        cohort: Cohort,
        target_rate: float = DEFAULT_TARGET_RATE,
        next_expiry: float | None = None,
    ) -> WatchlistIndex:
        m = l2_normalise(np.asarray(embeddings, np.float32).reshape(len(ids), cohort.dim))
        mu, sd = cohort.stats(m) if len(ids) else (np.zeros(0), np.ones(0))
        thr = threshold_for_size(len(ids), target_rate, cohort.calibration)
        return cls(tenant, version, tuple(ids), m, mu, sd, thr, next_expiry)

    @classmethod
    def empty(cls, tenant: str, dim: int, version: int = 0) -> WatchlistIndex:
        z = np.zeros(0)
        return cls(tenant, version, (), np.zeros((0, dim), np.float32), z, z, float("inf"))

    def search(self, probe: FloatArray, probe_stats: tuple[float, float]) -> Match | None:
        """The best-scoring entry for a unit ``probe`` (None: empty watchlist)."""
        if not self.ids:
            return None
        raw = (self.matrix @ np.asarray(probe, np.float32)).astype(np.float64)
        scores = s_norm(raw, (self.entry_mu, self.entry_sd), probe_stats)
        i = int(np.argmax(scores))
        return Match(self.ids[i], float(scores[i]), float(raw[i]), self.threshold)
