"""Coverage of a call (DESIGN §8): what its legs delivered and what each dimension
analysed, published with the ``ended`` event.

Two halves, fed from different threads:

- :class:`FrameTally` runs on the playout thread: per row of the batch pull, frames by
  flag and the first tick with media, in a few numpy ops per tick. When the pull's
  layout changes (a leg added or removed) or a call ends, rows are folded into
  per-leg :class:`LegTally` objects.
- :class:`WindowTally` runs on the detector threads (the runtime's ``on_result``):
  per call and dimension, windows by outcome and the net speech of scored windows,
  overlapping windows counted once.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import (
    Abstention,
    Dimension,
    DimensionCoverage,
    LegCoverage,
    LegRole,
)
from detectors.contract import WindowResult

FRAME_S = 0.02
# native CS_FRAME_* values (cs_common.h): not started, normal, concealed, cng, paused
NOT_STARTED, NORMAL, CONCEALED, CNG, PAUSED = range(5)
N_FLAGS = 5


@dataclass(slots=True)
class LegTally:
    role: LegRole
    frames: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(N_FLAGS, np.int64))
    first_seen_ns: int = 0  # first tick the leg was in a pull
    first_media_ns: int = 0  # first tick with a NORMAL or CNG frame
    first_packet_ns: int = 0  # the first datagram's arrival (ingest counters)
    packets_received: int = 0
    packets_lost: int = 0
    packets_late: int = 0
    analysed: bool = False

    def fold(self, frames: npt.NDArray[np.int64], first_seen: int, first_media: int) -> None:
        self.frames += frames
        if first_seen and (not self.first_seen_ns or first_seen < self.first_seen_ns):
            self.first_seen_ns = first_seen
        if first_media and (not self.first_media_ns or first_media < self.first_media_ns):
            self.first_media_ns = first_media

    @property
    def silent(self) -> bool:
        """No packet and no media frame while the leg was not paused."""
        no_media = not (self.first_packet_ns or self.first_media_ns or self.packets_received)
        return no_media and not self.frames[PAUSED]

    def coverage(self) -> LegCoverage:
        f = self.frames
        ttfp = None
        # from the leg's first playout tick (its stream opened within a tick) to its
        # first datagram; else, if the stats were not read since, its first media frame
        # (which adds the jitter buffer's initial delay)
        first = self.first_packet_ns or self.first_media_ns
        if first and self.first_seen_ns:
            ttfp = max(0.0, (first - self.first_seen_ns) / 1e9)
        return LegCoverage(
            role=self.role,
            media_s=round(float(f[NORMAL]) * FRAME_S, 3),
            concealed_s=round(float(f[CONCEALED]) * FRAME_S, 3),
            cng_s=round(float(f[CNG]) * FRAME_S, 3),
            paused_s=round(float(f[PAUSED]) * FRAME_S, 3),
            not_started_s=round(float(f[NOT_STARTED]) * FRAME_S, 3),
            time_to_first_packet_s=None if ttfp is None else round(ttfp, 3),
            packets_received=self.packets_received,
            packets_lost=self.packets_lost,
            packets_late=self.packets_late,
            analysed=self.analysed,
            silent=self.silent,
        )


class FrameTally:
    """Frames by flag per row of the current pull layout (playout thread only)."""

    def __init__(self) -> None:
        self.rows: tuple[str, ...] = ()  # leg id of each row
        self._counts = np.zeros((0, N_FLAGS), np.int64)
        self._first_seen = np.zeros(0, np.int64)
        self._first_media = np.zeros(0, np.int64)

    def relayout(self, rows: tuple[str, ...], tallies: dict[str, LegTally]) -> None:
        """Fold every row into its leg's tally, then start rows for the new layout."""
        self.fold_all(tallies)
        self.rows = rows
        n = len(rows)
        self._counts = np.zeros((n, N_FLAGS), np.int64)
        self._first_seen = np.zeros(n, np.int64)
        self._first_media = np.zeros(n, np.int64)

    def count(self, flags: npt.NDArray[np.uint8], now_ns: int) -> None:
        n = len(self.rows)
        f = flags[:n].astype(np.intp)
        np.add.at(self._counts, (np.arange(n), np.minimum(f, N_FLAGS - 1)), 1)
        self._first_seen[self._first_seen == 0] = now_ns
        media = ((f == NORMAL) | (f == CNG)) & (self._first_media == 0)
        self._first_media[media] = now_ns

    def fold_rows(self, legs: set[str], tallies: dict[str, LegTally]) -> None:
        for row, leg in enumerate(self.rows):
            if leg in legs:
                self._fold_row(row, leg, tallies)

    def fold_all(self, tallies: dict[str, LegTally]) -> None:
        for row, leg in enumerate(self.rows):
            self._fold_row(row, leg, tallies)

    def _fold_row(self, row: int, leg: str, tallies: dict[str, LegTally]) -> None:
        tally = tallies.get(leg)
        if tally is not None:
            tally.fold(
                self._counts[row].copy(),
                int(self._first_seen[row]),
                int(self._first_media[row]),
            )
        self._counts[row] = 0
        # first_* stay: folding again later must not move them


@dataclass(slots=True)
class _DimTally:
    windows: int = 0
    scored: int = 0
    speech_s: float = 0.0
    abstentions: Counter[Abstention] = field(default_factory=Counter)
    unavailable: Counter[str] = field(default_factory=Counter)
    covered_to: dict[str, float] = field(default_factory=dict)  # leg -> end of counted span


class WindowTally:
    """Window outcomes per call and dimension (thread-safe; a leaf lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, dict[Dimension, _DimTally]] = {}

    def open(self, call_id: str) -> None:
        with self._lock:
            self._calls.setdefault(call_id, {})

    def on_result(self, r: WindowResult) -> None:
        with self._lock:
            dims = self._calls.get(r.key.call_id)
            if dims is None:
                return  # not analysed, or already ended
            t = dims.get(r.dimension)
            if t is None:
                t = dims[r.dimension] = _DimTally()
            t.windows += 1
            if r.abstained is not None:
                t.abstentions[r.abstained] += 1
                if r.abstained is Abstention.UNAVAILABLE:
                    why = r.reasons[0].removeprefix("unavailable: ") if r.reasons else "unknown"
                    t.unavailable[why] += 1
                return
            t.scored += 1
            start, end = r.key.start_s, r.key.end_s
            done = t.covered_to.get(r.key.leg_id, 0.0)
            if end > done and end > start:
                new_share = (end - max(start, done)) / (end - start)
                t.speech_s += r.quality.net_speech_s * new_share
                t.covered_to[r.key.leg_id] = end

    def take(
        self, call_id: str, expected: tuple[Dimension, ...] = ()
    ) -> dict[Dimension, DimensionCoverage]:
        """The call's coverage per dimension; ``expected`` dimensions that produced no
        window are listed with zero windows."""
        with self._lock:
            dims = self._calls.pop(call_id, {})
        for dim in expected:
            dims.setdefault(dim, _DimTally())
        return {
            dim: DimensionCoverage(
                windows=t.windows,
                scored_windows=t.scored,
                analysed_speech_s=round(t.speech_s, 3),
                abstentions=dict(t.abstentions),
                unavailable=dict(t.unavailable),
            )
            for dim, t in dims.items()
        }
