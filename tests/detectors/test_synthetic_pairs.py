"""Paired training windows (``pairs``, ``train-synthetic --paired``): each resynthesis
spoof finds its own source file, the pair is cut at one offset through one channel draw
(on real speech, bit for bit), TTS draws keep their partners, a pair is never split across
batches, and the option is in the cache key and reaches the window draw from the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.eval.audio import read_audio, resample
from detectors.synthetic import channel, pairs, train
from detectors.synthetic.dataset import Clip
from detectors.synthetic.train import TrainConfig

WAV = "data/speech/librispeech_misc/lhotse/1088-134315-0000.wav"


def _clip(path: str, label: int, speaker: str, family: str) -> Clip:
    return Clip(Path(path), label, "train", speaker, family, family)


CLIPS = [
    _clip("bona/libri_1/a.wav", 0, "libri_1", "bonafide"),  # 0
    _clip("bona/libri_1/b.wav", 0, "libri_1", "bonafide"),  # 1
    _clip("bona/arctic_slt/a.wav", 0, "arctic_slt", "bonafide"),  # 2: another speaker's a
    _clip("gen/world_libri_1/a.r1.wav", 1, "world_libri_1", "world"),  # 3 -> 0 (revised)
    _clip("gen/griffinlim_libri_1/b.wav", 1, "griffinlim_libri_1", "griffinlim"),  # 4 -> 1
    _clip("gen/neuralvoc_arctic_slt/a.voc3k.wav", 1, "neuralvoc_arctic_slt", "neuralvoc"),  # 5
    _clip("gen/espeak_en-us/a.wav", 1, "espeak_en-us", "espeak"),  # 6: TTS, no source
    _clip("gen/world_libri_2/a.wav", 1, "world_libri_2", "world"),  # 7: source not here
]


def test_each_resynthesis_finds_its_own_source_file() -> None:
    assert pairs.sources(CLIPS) == {3: 0, 4: 1, 5: 2}


def test_pairing_replaces_only_the_partners_of_resynthesis_draws() -> None:
    picks = np.array([2, 3, 0, 6, 1, 7, 2, 5, 0, 4])
    seeds = np.arange(100, 110)
    lengths = [30_000, 20_000, 50_000, 29_960, 20_040, 40_000, 9_000, 25_000]
    got, got_seeds, spans, made = pairs.pair(picks, seeds, lengths, CLIPS)
    assert made == 3
    assert got.tolist() == [0, 3, 0, 6, 1, 7, 2, 5, 1, 4]
    # a pair shares its spoof's channel seed; the unpaired draws keep their own
    assert got_seeds.tolist() == [101, 101, 102, 103, 104, 105, 107, 107, 109, 109]
    # both halves are cut within the shorter of the two
    assert spans.tolist() == [29_960, 29_960, 0, 0, 0, 0, 40_000, 40_000, 20_000, 20_000]
    assert picks.tolist() == [2, 3, 0, 6, 1, 7, 2, 5, 0, 4]  # the draw itself is not changed


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    """6 s of real speech at 8 kHz, peak 0.5."""
    x, rate = read_audio(shared_dir / WAV)
    y = resample(np.asarray(x, np.float32), int(rate), channel.RATE)[: 2 * train.WINDOW]
    assert len(y) == 2 * train.WINDOW
    return (0.5 * y / np.max(np.abs(y))).astype(np.float32)


@pytest.mark.parametrize("trim", [0, 40, 28_000])  # 28,000: 2.5 s left, under a window
def test_a_pair_is_cut_at_one_offset_through_one_channel(speech: np.ndarray, trim: int) -> None:
    """A 'resynthesis' that is its source sample for sample (``trim`` samples shorter, as
    a vocoder's last frame can be; or shorter than a window) gives the same window as its
    source in every pair: same offset, same noise, level, band, codec and loss. Unpaired,
    the two are cut and channelled independently."""
    spoof = speech[: len(speech) - trim] if trim else speech.copy()
    name = Path(WAV).name
    clips = [
        _clip(f"bona/libri_1/{name}", 0, "libri_1", "bonafide"),
        _clip(f"gen/griffinlim_libri_1/{name}", 1, "griffinlim_libri_1", "griffinlim"),
    ]
    windows, labels = train.draw_windows(clips, [speech, spoof], 16, seed=3, workers=1, paired=True)
    assert labels.tolist() == [0.0, 1.0] * 8
    for k in range(0, 16, 2):
        assert np.array_equal(windows[k], windows[k + 1]), k
    assert len({windows[k].tobytes() for k in range(0, 16, 2)}) == 8  # the pairs differ
    plain, _ = train.draw_windows(clips, [speech, spoof], 16, seed=3, workers=1)
    assert sum(np.array_equal(plain[k], plain[k + 1]) for k in range(0, 16, 2)) == 0


def test_a_pair_is_never_split_across_batches() -> None:
    rng = np.random.default_rng(0)
    order = pairs.batch_order(64, rng)
    assert sorted(order.tolist()) == list(range(64))
    assert order.tolist() != list(range(64))  # shuffled
    for b in range(0, 64, 32):
        batch = set(order[b : b + 32].tolist())
        assert all(i ^ 1 in batch for i in batch)
    with pytest.raises(ValueError, match="even"):
        pairs.batch_order(63, rng)


def test_training_takes_the_paired_order_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[int]] = []
    real = pairs.batch_order

    def spy(n: int, rng: np.random.Generator) -> np.ndarray:
        order = real(n, rng)
        seen.append(order.tolist())
        return order

    monkeypatch.setattr(pairs, "batch_order", spy)
    rng = np.random.default_rng(1)
    windows = (rng.standard_normal((8, train.WINDOW)) * 3000).astype(np.int16)
    labels = (np.arange(8) % 2).astype(np.float32)
    cfg = TrainConfig(windows=8, epochs=2, batch=4)
    train.train(windows, labels, cfg, seed=0)
    assert seen == []
    _, losses = train.train(windows, labels, replace(cfg, paired=True), seed=0)
    assert len(seen) == 2 and len(losses) == 2 and all(np.isfinite(losses))


def test_the_flag_is_in_the_cache_key_and_old_keys_are_unchanged() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    cfg = TrainConfig()
    plain = train.stage_key(cfg, 1, systems)
    on = train.stage_key(replace(cfg, paired=True), 1, systems)
    assert on != plain
    assert on == train.stage_key(replace(cfg, paired=True), 1, list(reversed(systems)))
    assert len({on, train.stage_key(replace(cfg, paired=True, rawboost=True), 1, systems)}) == 2


def test_the_cli_flag_reaches_the_window_draw(
    draws_with_and_without: Callable[..., list[tuple[tuple[Any, ...], dict[str, Any]]]],
) -> None:
    asked = [kwargs for _, kwargs in draws_with_and_without("--paired")]
    assert [a.get("paired") for a in asked] == [True, False]


def test_an_odd_window_budget_is_refused_before_the_draw(
    quick_cnn_argv: Callable[..., list[str]],
    stop_at_the_draw: list[tuple[tuple[Any, ...], dict[str, Any]]],
    synthetic_quick_work: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sip_bridge.cli import main

    argv = quick_cnn_argv(synthetic_quick_work / "unused", "--paired", "--windows", "95")
    assert main(argv) == 1
    assert "--windows must be even" in capsys.readouterr().out
    assert stop_at_the_draw == []
