"""The perceptual-codec step of the synthetic_voice training channel (``lossy``,
``channel.augment(codec_aug=True)``, ``train-synthetic --codec-aug``): real MP3 / AAC /
Opus encoders (PyAV), on real speech. Deterministic per window seed, output aligned and
of the same length and level, the codec really applied, both classes through the same
path, and the flag in the training cache key (and nowhere else)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from detectors.eval.audio import read_audio, resample
from detectors.synthetic import channel, lossy, train
from detectors.synthetic.dataset import Clip
from detectors.synthetic.train import TrainConfig

WAV = "data/speech/librispeech_misc/lhotse/1088-134315-0000.wav"  # 16 s, uncompressed


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    """3 s of real speech at 8 kHz, peak 0.5."""
    x, rate = read_audio(shared_dir / WAV)
    y = resample(np.asarray(x, np.float32), int(rate), channel.RATE)[: train.WINDOW]
    return (0.5 * y / np.max(np.abs(y))).astype(np.float32)


def _lag(y: np.ndarray, x: np.ndarray, span: int = 200) -> int:
    return max(range(-span, span + 1), key=lambda k: float(np.dot(np.roll(y, -k), x)))


def _snr_db(y: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(x**2) / np.sum((y - x) ** 2)))


def test_each_codec_is_applied_aligned_and_keeps_length_and_level(speech: np.ndarray) -> None:
    x = speech
    for name, fn in (
        ("mp3 16k", lambda v: lossy.wideband(v, "libmp3lame", 16_000)),
        ("mp3 64k", lambda v: lossy.wideband(v, "libmp3lame", 64_000)),
        ("aac 16k", lambda v: lossy.wideband(v, "aac", 16_000)),
    ):
        y = fn(x)
        assert y.dtype == np.float32 and y.shape == x.shape, name
        assert np.all(np.isfinite(y)), name
        assert _lag(y, x) == 0, name  # the encoder's priming is removed
        snr = _snr_db(y, x)
        assert 8.0 < snr < 40.0, (name, snr)  # coded (not a copy), still the same speech
        ratio = float(np.std(y) / np.std(x))
        assert 0.7 < ratio < 1.3, (name, ratio)
    # a lower bit rate costs more of the signal
    assert _snr_db(lossy.wideband(x, "libmp3lame", 16_000), x) < _snr_db(
        lossy.wideband(x, "libmp3lame", 64_000), x
    )


def test_lossy_is_deterministic_per_seed_and_draws_every_codec(speech: np.ndarray) -> None:
    x = speech[: channel.RATE]  # 1 s keeps it fast
    a = lossy.lossy(x, np.random.default_rng(3))
    b = lossy.lossy(x, np.random.default_rng(3))
    assert np.array_equal(a, b)
    outs = [lossy.lossy(x, np.random.default_rng(s)) for s in range(24)]
    assert len({o.tobytes() for o in outs}) > 3  # codecs and bit rates vary with the seed
    for o in outs:
        assert o.shape == x.shape and np.all(np.isfinite(o))
        assert np.corrcoef(o, x)[0, 1] > 0.5
    kinds = {
        [k for k, _ in lossy.KINDS][
            int(np.random.default_rng(s).choice(len(lossy.KINDS), p=[p for _, p in lossy.KINDS]))
        ]
        for s in range(24)
    }
    assert kinds == {"mp3", "aac", "opus"}


@pytest.mark.parametrize(
    ("flag", "share"), [("codec_aug", channel.CODEC_AUG), ("rawboost", channel.RAWBOOST)]
)
def test_augment_off_draws_nothing_more_and_on_is_seeded(
    speech: np.ndarray, flag: str, share: float
) -> None:
    """Each optional step of ``channel.augment`` (this module's codec step and the
    RawBoost-style one, ``test_synthetic_rawboost``): off, the windows are the old ones."""
    x = speech
    differs = 0
    for s in range(8):
        off = channel.augment(x, np.random.default_rng(s))
        assert np.array_equal(off, channel.augment(x, np.random.default_rng(s), **{flag: False}))
        on = channel.augment(x, np.random.default_rng(s), **{flag: True})
        assert np.array_equal(on, channel.augment(x, np.random.default_rng(s), **{flag: True}))
        assert on.shape == x.shape and np.all(np.abs(on) <= 1.0)
        differs += not np.array_equal(on, off)
    assert differs >= 2
    # about ``share`` of the windows take the step (the first draw decides it)
    took = np.mean([np.random.default_rng(s).random() < share for s in range(2000)])
    assert abs(took - share) < 0.04


def test_both_classes_take_the_same_path(speech: np.ndarray, shared_dir: Path) -> None:
    x = speech
    clips = [  # the same audio labelled both ways
        Clip(shared_dir / WAV, 0, "train", "librispeech_1088", "bonafide", "bonafide"),
        Clip(shared_dir / WAV, 1, "train", "librispeech_1088", "griffinlim", "griffinlim_gl32"),
    ]
    train._init([x, x.copy()])
    for seed in range(5):
        bona = train._window((0, seed, False, True, False, 0))
        spoof = train._window((1, seed, False, True, False, 0))
        assert np.array_equal(bona, spoof)  # the label never reaches the channel
    windows, labels = train.draw_windows(clips, [x, x], 8, seed=1, workers=1, codec_aug=True)
    again, _ = train.draw_windows(clips, [x, x], 8, seed=1, workers=1, codec_aug=True)
    assert np.array_equal(windows, again) and set(labels.tolist()) == {0.0, 1.0}


def test_the_flag_is_in_the_cache_key_and_old_keys_are_unchanged() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    cfg = TrainConfig()
    old_fields: tuple[object, ...] = (cfg.windows, cfg.epochs, cfg.batch, cfg.lr, cfg.weight_decay)
    old_fields += (tuple(sorted(set(systems))), tuple(sorted(train.FAMILY_WEIGHT.items())))
    old = hashlib.sha256(repr(old_fields).encode()).hexdigest()[:10]
    assert train.stage_key(cfg, 1, systems) == old  # cached plain builds stay valid
    on = train.stage_key(replace(cfg, codec_aug=True), 1, systems)
    assert on != old
    assert on == train.stage_key(replace(cfg, codec_aug=True), 1, list(reversed(systems)))
