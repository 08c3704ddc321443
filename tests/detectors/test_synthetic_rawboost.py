"""The RawBoost-style step of the synthetic_voice training channel (``rawboost``,
``channel.augment(rawboost=True)``, ``train-synthetic --rawboost``) on real speech: the
notch filters notch, the nonlinear sum makes harmonics a linear filter cannot, impulses
touch at most their share of samples within their gain, the step is seeded and level
preserving (off: old windows, in ``test_synthetic_codec_aug``, shared with the codec step),
both classes take the same path, and the flag is in the cache key (old keys unchanged)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.signal import freqz

from detectors.eval.audio import read_audio, resample
from detectors.synthetic import channel, rawboost, train
from detectors.synthetic.dataset import Clip
from detectors.synthetic.train import TrainConfig

WAV = "data/speech/librispeech_misc/lhotse/1088-134315-0000.wav"


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    """3 s of real speech at 8 kHz, peak 0.5."""
    x, rate = read_audio(shared_dir / WAV)
    y = resample(np.asarray(x, np.float32), int(rate), channel.RATE)[: train.WINDOW]
    return (0.5 * y / np.max(np.abs(y))).astype(np.float32)


def test_notch_filters_cut_a_band_and_pass_the_rest() -> None:
    deepest = []
    for s in range(30):
        h = rawboost.notch_filter(np.random.default_rng(s))
        _, resp = freqz(h, worN=2048, fs=rawboost.RATE)
        mag = np.abs(resp)
        assert len(h) % 2 == 1 and np.all(np.isfinite(h))
        assert mag.max() > 0.7  # most of the band passes
        deepest.append(float(mag.min()))
    # a notch of 11 taps is shallow; most filters cut some band by 10 dB or more
    assert np.mean(np.array(deepest) < 10 ** (-10 / 20)) > 0.6


def _level_at(y: np.ndarray, hz: float) -> float:
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    freqs = np.fft.rfftfreq(len(y), 1 / rawboost.RATE)
    return float(spec[np.argmin(np.abs(freqs - hz))] / spec.max())


def test_convolutive_keeps_peak_and_length_and_adds_harmonics() -> None:
    t = np.arange(train.WINDOW) / rawboost.RATE
    tone = (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    assert _level_at(tone, 880) < 1e-3 and _level_at(tone, 1320) < 1e-3
    harmonics = 0
    for s in range(20):
        y = rawboost.convolutive(tone, np.random.default_rng(s))
        assert y.shape == tone.shape and y.dtype == np.float32
        assert np.max(np.abs(y)) == pytest.approx(0.4, rel=1e-4)
        assert np.array_equal(y, rawboost.convolutive(tone, np.random.default_rng(s)))
        harmonics += max(_level_at(y, 880), _level_at(y, 1320)) > 1e-2
    # order 2 or 3 is drawn for about two thirds of the windows
    assert 5 <= harmonics <= 19
    silent = np.zeros(100, np.float32)
    assert np.array_equal(rawboost.convolutive(silent, np.random.default_rng(0)), silent)


def test_impulses_touch_their_share_within_their_gain(speech: np.ndarray) -> None:
    x = speech
    for s in range(10):
        y = rawboost.impulsive(x, np.random.default_rng(s))
        changed = y != x
        assert changed.mean() <= rawboost.IMPULSE_SHARE
        ratio = y[changed] / x[changed]
        assert np.all(np.abs(ratio - 1.0) <= rawboost.IMPULSE_GAIN + 1e-6)
    assert any(
        (rawboost.impulsive(x, np.random.default_rng(s)) != x).mean() > 0.02 for s in range(10)
    )


def test_both_classes_take_the_same_path(speech: np.ndarray, shared_dir: Path) -> None:
    x = speech
    clips = [
        Clip(shared_dir / WAV, 0, "train", "librispeech_1088", "bonafide", "bonafide"),
        Clip(shared_dir / WAV, 1, "train", "librispeech_1088", "griffinlim", "griffinlim_gl32"),
    ]
    train._init([x, x.copy()])
    for seed in range(5):
        assert np.array_equal(
            train._window((0, seed, False, False, True, 0)),
            train._window((1, seed, False, False, True, 0)),
        )
    windows, labels = train.draw_windows(clips, [x, x], 8, seed=1, workers=1, rawboost=True)
    plain, _ = train.draw_windows(clips, [x, x], 8, seed=1, workers=1)
    assert set(labels.tolist()) == {0.0, 1.0} and not np.array_equal(windows, plain)


def test_the_flag_is_in_the_cache_key_and_old_keys_are_unchanged() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    cfg = TrainConfig()
    plain = train.stage_key(cfg, 1, systems)
    on = train.stage_key(replace(cfg, rawboost=True), 1, systems)
    both = train.stage_key(replace(cfg, rawboost=True, codec_aug=True), 1, systems)
    assert len({plain, on, both, train.stage_key(replace(cfg, codec_aug=True), 1, systems)}) == 4
    assert on == train.stage_key(replace(cfg, rawboost=True), 1, list(reversed(systems)))


def test_the_cli_flag_reaches_the_window_draw(
    draws_with_and_without: Callable[..., list[tuple[tuple[Any, ...], dict[str, Any]]]],
) -> None:
    """``train-synthetic --rawboost`` (the quick CNN recipe, whose spoofs the other quick
    builds share) asks for RawBoost windows, and without the flag it does not. The build
    is stopped at the draw: training is the quick builds' tests' business."""
    asked = [kwargs for _, kwargs in draws_with_and_without("--rawboost")]
    assert [a.get("rawboost") for a in asked] == [True, False]
    assert [a.get("codec_aug") for a in asked] == [False, False]
