"""When the calls of one load round of ``callshield bench alert-latency`` start.

Every call's window grid runs from the moment its leg is added (``detectors.windowing``):
calls started in one tick have their grids in phase, so each hop every call's window of
a model reaches that model's lane in one burst (40 AASIST-class windows at ~24 ms each:
about a second of CPU at once on two cores), and the windows at the back of the burst
wait for the ones in front.

- ``staggered`` (the default): start offsets drawn independently and uniformly over
  ``[0, spread)``, spread = one hop of the slowest voice model (the most CPU per window,
  timed at the bench's start: the lane whose bursts cost most); its grid repeats every
  hop, so offsets uniform over it are uniform grid phases, as for calls that arrive
  independently of each other in a contact center. Seeded per round so a run is
  reproducible. This is steady traffic at N concurrent calls, which is what
  issue 5's "alert latency ... at that load" means.
- ``aligned``: all calls started at once (in one loop, as fast as the control API
  creates them): a predictive dialer's campaign burst, the worst case for batching.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from detectors.contract import VOICE_DIMENSIONS, Detector, DetectorSpec


class Arrivals(StrEnum):
    STAGGERED = "staggered"
    ALIGNED = "aligned"


@dataclass(frozen=True, slots=True)
class Spread:
    seconds: float
    source: str  # where the spread came from, for the report


def window_cost_s(detector: Detector, runs: int = 3) -> float:
    """Median wall time of one batch-1 window of low-level noise through ``detector``
    (after one untimed run), s: this machine's cost, now."""
    audio = (1e-3 * np.random.default_rng(0).standard_normal((1, detector.spec.window))).astype(
        np.float32
    )
    detector.run_batch(audio)
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        detector.run_batch(audio)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hop_spread(costs: Iterable[tuple[DetectorSpec, float]], given_s: float | None = None) -> Spread:
    """The span staggered starts are spread over: ``given_s`` when given, else the hop
    of the voice model (``VOICE_DIMENSIONS``) with the highest cost per window in
    ``costs`` (spec, seconds; the first on a tie). A bench without a voice model has
    nothing to spread for: an error."""
    if given_s is not None:
        if given_s < 0:
            raise ValueError(f"arrival spread must be >= 0 s, got {given_s}")
        return Spread(given_s, "--arrival-spread-s")
    voice = [(s, c) for s, c in costs if s.dimension in VOICE_DIMENSIONS]
    if not voice:
        raise ValueError("no voice model runs: give the arrival spread explicitly")
    slowest, cost = max(voice, key=lambda p: p[1])
    return Spread(slowest.hop_s, f"hop of {slowest.name} ({cost * 1000:.1f} ms per window)")


def start_offsets(n: int, arrivals: Arrivals, spread_s: float, seed: int) -> list[float]:
    """Seconds after a round's start at which each of its ``n`` calls starts (in call
    order, not sorted): all 0 when aligned, else independent uniform draws in
    ``[0, spread_s)`` from ``random.Random(seed)``."""
    if n < 0:
        raise ValueError(f"call count must be >= 0, got {n}")
    if arrivals is Arrivals.ALIGNED or spread_s == 0.0:
        return [0.0] * n
    rng = random.Random(seed)
    return [rng.random() * spread_s for _ in range(n)]


def round_seed(seed: int, round_index: int) -> int:
    """A different, reproducible draw for every load round of a run."""
    return seed * 1_000_003 + round_index
