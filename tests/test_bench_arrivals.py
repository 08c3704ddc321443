"""`callshield bench alert-latency --arrivals`: when the calls of a load round start.
Aligned: all at once. Staggered: seeded independent uniform offsets over one hop of the
slowest voice model (the most CPU per window; speech-activity models do not count),
reproducible per seed and different per round."""

from __future__ import annotations

import subprocess
import sys

import pytest

from detectors.alert_schema import Dimension
from detectors.contract import DetectorSpec
from detectors.replay.detector import ReplayFingerprinter
from sip_bridge.bench.arrivals import (
    Arrivals,
    Spread,
    hop_spread,
    round_seed,
    start_offsets,
    window_cost_s,
)


def _spec(name: str, dimension: Dimension, rate: int, hop: int) -> DetectorSpec:
    return DetectorSpec(name, "1", dimension, rate, window=2 * hop, hop=hop)


def test_aligned_starts_every_call_at_once() -> None:
    assert start_offsets(40, Arrivals.ALIGNED, 1.5, seed=7) == [0.0] * 40
    assert start_offsets(5, Arrivals.STAGGERED, 0.0, seed=7) == [0.0] * 5
    assert start_offsets(0, Arrivals.STAGGERED, 1.5, seed=7) == []


def test_staggered_is_uniform_over_the_spread_and_reproducible() -> None:
    offsets = start_offsets(4000, Arrivals.STAGGERED, 1.5, seed=round_seed(0, 0))
    assert len(offsets) == 4000
    assert all(0.0 <= t < 1.5 for t in offsets)
    quarters = [sum(1 for t in offsets if q * 0.375 <= t < (q + 1) * 0.375) for q in range(4)]
    assert all(900 <= n <= 1100 for n in quarters), quarters
    assert offsets == start_offsets(4000, Arrivals.STAGGERED, 1.5, seed=round_seed(0, 0))
    # another round, or another seed, draws other phases
    assert offsets != start_offsets(4000, Arrivals.STAGGERED, 1.5, seed=round_seed(0, 1))
    assert offsets != start_offsets(4000, Arrivals.STAGGERED, 1.5, seed=round_seed(1, 0))
    assert round_seed(0, 1) != round_seed(1, 0)


def test_spread_is_the_hop_of_the_slowest_voice_model() -> None:
    costs = [
        (_spec("replay", Dimension.REPLAY, 8000, 16_000), 0.002),  # 2 s hop, cheap
        (_spec("aasist", Dimension.SYNTHETIC_VOICE, 8000, 12_000), 0.024),  # 1.5 s
        (_spec("speaker", Dimension.VOICE_MISMATCH, 16_000, 24_000), 0.012),  # 1.5 s
        (_spec("vad", Dimension.SPEECH_ACTIVITY, 8000, 8_000), 0.5),  # not a voice model
    ]
    spread = hop_spread(costs)
    assert (spread.seconds, spread.source) == (1.5, "hop of aasist (24.0 ms per window)")
    assert hop_spread(costs, 0.75) == Spread(0.75, "--arrival-spread-s")
    with pytest.raises(ValueError, match=">= 0"):
        hop_spread(costs, -1.0)
    with pytest.raises(ValueError, match="no voice model"):
        hop_spread(costs[3:])


def test_window_cost_is_timed_on_the_detector_itself() -> None:
    fingerprinter = ReplayFingerprinter()  # the bridge's numpy replay detector
    cost = window_cost_s(fingerprinter, runs=3)
    assert 0.0 < cost < 1.0


def test_bench_refuses_a_spread_longer_than_the_lead() -> None:
    command = ["bench", "alert-latency", "--tiny", "--json", "--arrival-spread-s", "5"]
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--arrival-spread-s 5.0 exceeds --lead-s 1.0" in out.stderr
