"""Watchlist thresholds from the impostor tail, and one watchlist search per call (issue
10): the exponential tail fit recovers a known tail, the threshold it gives holds the
per-call false-match rate on impostor scores drawn from that tail where the Gaussian of
the same mean and spread does not, the cohort file keeps the fit (an older file falls
back to the Gaussian), and the biometrics stage searches the watchlist once per call."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from detectors.alert_schema import Dimension, LegRole
from detectors.bus.biometrics import BiometricsMode
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.speaker.biometrics_stage import BiometricsConfig, SpeakerBiometrics
from detectors.speaker.cohort import load_cohort, save_cohort
from detectors.speaker.scoring import (
    Calibration,
    Cohort,
    fit,
    gaussian_threshold_for_size,
    l2_normalise,
    threshold_for_size,
)
from detectors.speaker.shared_state import StaticSpeakerState
from detectors.speaker.watchlist_index import WatchlistIndex


def _laplace(n: int, seed: int) -> np.ndarray:
    """Impostor-like scores with an exponential upper tail (scale 1): heavier than a
    Gaussian of the same spread."""
    return np.random.default_rng(seed).laplace(0.0, 1.0, n)


def test_fit_recovers_an_exponential_tail() -> None:
    cal = fit(_laplace(200_000, 1))
    assert cal.tail_share == pytest.approx(0.05, abs=1e-4)
    assert cal.tail_beta == pytest.approx(1.0, rel=0.05)
    # P(x >= t) = 0.5 exp(-t) for a Laplace(0, 1)
    assert cal.false_match(6.0) == pytest.approx(0.5 * math.exp(-6.0), rel=0.15)
    assert fit(np.arange(50.0)).tail_share == 0.0  # too few for a tail: Gaussian only


def test_tail_threshold_holds_the_per_call_rate_the_gaussian_misses() -> None:
    cal = fit(_laplace(20_000, 2))
    size, target = 100, 0.01
    rng = np.random.default_rng(3)
    calls = rng.laplace(0.0, 1.0, (20_000, size)).max(axis=1)  # best entry per call
    tail = float(np.mean(calls >= threshold_for_size(size, target, cal)))
    gauss = float(np.mean(calls >= gaussian_threshold_for_size(size, target, cal)))
    assert 0.004 < tail < 0.02  # about the target (sampling and fit error)
    assert gauss > 0.1  # the Gaussian of the same mean/sd: more than 10x the target
    no_tail = Calibration(cal.mean, cal.sd, cal.trials)
    assert threshold_for_size(size, target, no_tail) == gaussian_threshold_for_size(
        size, target, cal
    )


def test_cohort_file_keeps_the_tail_and_old_files_read_as_gaussian(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    emb = l2_normalise(rng.standard_normal((6, 8)).astype(np.float32))
    cal = fit(_laplace(1000, 5))
    save_cohort(tmp_path / "c.npz", Cohort(emb, 50, cal), ["a"] * 6, {"model": "m"})
    cohort, _, _ = load_cohort(tmp_path / "c.npz")
    assert cohort.calibration == cal and cohort.top_k == 50
    old = {"model": "m", "calibration": {"mean": 0.0, "sd": 1.0, "trials": 9}}
    np.savez(
        tmp_path / "old.npz",
        embeddings=emb,
        speakers=np.asarray(["a"] * 6),
        top_k=np.asarray(200),
        info=np.asarray(json.dumps(old)),
    )
    cohort, _, _ = load_cohort(tmp_path / "old.npz")
    assert cohort.calibration == Calibration(0.0, 1.0, 9)


def _window(emb: np.ndarray, start: float) -> WindowResult:
    return WindowResult(
        key=WindowKey("c", "leg", LegRole.EXTERNAL, start, start + 3.0),
        detector="speaker",
        model_version="1",
        dimension=Dimension.VOICE_MISMATCH,
        provider="cpu",
        score=0.0,
        threshold=0.5,
        abstained=None,
        quality=WindowQuality(net_speech_s=3.0),
        embedding=emb,
    )


def test_the_watchlist_is_searched_once_per_call() -> None:
    rng = np.random.default_rng(6)
    cohort = Cohort(
        l2_normalise(rng.standard_normal((80, 32)).astype(np.float32)), 200, Calibration()
    )
    voices = l2_normalise(rng.standard_normal((20, 32)).astype(np.float32))
    state = StaticSpeakerState(cohort)
    state.indexes["t"] = WatchlistIndex.build(
        "t", 1, [f"e{i}" for i in range(20)], voices, cohort, 0.001
    )
    bio = SpeakerBiometrics(state, BiometricsConfig(6.0, BiometricsMode.WATCHLIST_ONLY))
    bio.open_call("c", "t")
    searched = []
    for i in range(8):  # 3 s apart: 3, 6 (the search), 9, ... 24 s of speech
        near = l2_normalise(voices[5] + 0.2 * rng.standard_normal(32).astype(np.float32))
        out = bio.process(_window(near, 3.0 * i))
        searched += [r for r in out if r.dimension is Dimension.KNOWN_FRAUDSTER]
    assert len(searched) == 1
    assert searched[0].reasons[0].startswith("watchlist entry e5:")
    assert "over 6.0 s of speech" in searched[0].reasons[0]
    bio.end_call("c")
    bio.open_call("c", "t")  # a new call searches again
    for i in range(2):
        out = bio.process(_window(voices[5], 3.0 * i))
    assert [r.dimension for r in out].count(Dimension.KNOWN_FRAUDSTER) == 1
