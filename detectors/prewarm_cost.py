"""Pre-warm timing: each detector's cost per window before any call, alone and with the
whole worker pool busy, so admission's estimate on a fresh node is the one it has under
load (issue 5).

Measured by the scheduler's pre-warm, after every batch shape has run once (the cold
runs are not timed), on windows of low-level noise:

- ``alone[name][b]``: per-window cost of batch shape ``b`` on one thread with nothing
  else of ours running (the fastest of ``reps`` runs): what light traffic observes;
- ``loaded[name]``: per-window cost of a full batch (``max_batch``) while ``workers``
  threads run full batches of every lane at once, each lane at most ``max_inflight``
  at a time, as the scheduler runs them (the median of the runs): what a node at
  capacity pays per window. On the 2-core development box the 8 kHz AASIST costs 24 ms
  per window alone and 42-45 ms per window under a 40-call load: the cores are shared,
  batching does not help.

``contention(name, b) = loaded / alone[b]`` turns a window measured on a quiet pool at
batch size ``b`` into the cost the same window will have when the node is full.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from detectors.contract import Detector, FloatArray

NOISE_LEVEL = 1e-3  # as detectors.model_cost: a window of low-level noise


@dataclass(frozen=True, slots=True)
class PrewarmCosts:
    """Seconds per window, per detector (see the module docstring)."""

    workers: int
    alone: dict[str, dict[int, float]] = field(default_factory=dict)
    loaded: dict[str, float] = field(default_factory=dict)

    def contention(self, name: str, batch: int) -> float | None:
        """``loaded / alone`` at the largest timed shape not above ``batch`` (None:
        not timed). At least 1: a full pool never makes a window cheaper."""
        shapes = self.alone.get(name, {})
        fits = [b for b in shapes if b <= max(1, batch)]
        if name not in self.loaded or not fits:
            return None
        alone = shapes[max(fits)]
        return max(1.0, self.loaded[name] / alone) if alone > 0 else None


@dataclass(frozen=True, slots=True)
class TimedLane:
    """What the timing needs of one scheduler lane."""

    detector: Detector
    shapes: tuple[int, ...]  # the batch shapes the lane runs (its warm-up shapes)
    max_inflight: int


def _noise(batch: int, window: int, seed: int) -> FloatArray:
    rng = np.random.default_rng(seed)
    audio: FloatArray = (NOISE_LEVEL * rng.standard_normal((batch, window))).astype(np.float32)
    return audio


def _time(detector: Detector, audio: FloatArray) -> float:
    t0 = time.perf_counter()
    detector.run_batch(audio)
    return time.perf_counter() - t0


def time_alone(lane: TimedLane, reps: int) -> dict[int, float]:
    """Per-window cost of each shape on this thread alone: the fastest of ``reps``."""
    window = lane.detector.spec.window
    costs: dict[int, float] = {}
    for b in lane.shapes:
        audio = _noise(b, window, b)
        costs[b] = min(_time(lane.detector, audio) for _ in range(max(1, reps))) / b
    return costs


def time_loaded(lanes: Sequence[TimedLane], workers: int, reps: int) -> dict[str, float]:
    """Per-window cost of each lane's full batch while ``workers`` threads each run
    ``reps`` rounds over every lane (starting at different lanes, a lane's slots taken
    as the scheduler would: at most ``max_inflight`` of its batches at once; a thread
    whose next lane is full takes the next free one)."""
    if not lanes:
        return {}
    slots = [threading.BoundedSemaphore(max(1, lane.max_inflight)) for lane in lanes]
    inputs = [_noise(max(lane.shapes), lane.detector.spec.window, 7) for lane in lanes]
    samples: dict[str, list[float]] = {lane.detector.spec.name: [] for lane in lanes}
    lock = threading.Lock()
    start = threading.Barrier(workers)

    def worker(offset: int) -> None:
        start.wait()
        todo = [(offset + k) % len(lanes) for k in range(reps * len(lanes))]
        while todo:
            pick = next((i for i in todo if slots[i].acquire(blocking=False)), None)
            if pick is None:
                pick = todo[0]
                slots[pick].acquire()
            todo.remove(pick)
            try:
                spent = _time(lanes[pick].detector, inputs[pick])
            finally:
                slots[pick].release()
            with lock:
                samples[lanes[pick].detector.spec.name].append(spent / inputs[pick].shape[0])

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"prewarm-{i}") for i in range(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {name: statistics.median(s) for name, s in samples.items() if s}


def measure(lanes: Sequence[TimedLane], workers: int, reps: int) -> PrewarmCosts:
    """Alone, then with the pool full (run after the cold warm-up runs)."""
    workers = max(1, workers)
    alone = {lane.detector.spec.name: time_alone(lane, reps) for lane in lanes}
    return PrewarmCosts(workers, alone, time_loaded(lanes, workers, reps))
