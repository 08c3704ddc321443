"""``train-synthetic --restart N``: the same split, spoofs and windows as the seed's build,
trained from other initial weights and batch order, so that builds differing in nothing
else measure how far training alone spreads a recipe (docs/models/synthetic_voice.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.synthetic import train
from detectors.synthetic.train import TrainConfig


class TrainingReachedError(Exception):
    pass


def test_restart_zero_is_the_seed_itself_and_others_differ() -> None:
    assert train.restart_seed(7, 0) == 7
    seeds = {train.restart_seed(s, r) for s in (0, 1) for r in (1, 2, 3)}
    assert len(seeds) == 6 and not seeds & {0, 1}
    assert train.restart_seed(0, 2) == train.restart_seed(0, 2)
    with pytest.raises(ValueError):
        train.restart_seed(0, -1)


def _weights(cfg: TrainConfig) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    windows = (rng.standard_normal((8, train.WINDOW)) * 3000).astype(np.int16)
    labels = (np.arange(8) % 2).astype(np.float32)
    model, _ = train.train(windows, labels, cfg, seed=0)
    return [p.detach().numpy().copy() for p in model.parameters()]


def test_a_restart_trains_other_weights_and_repeats_itself() -> None:
    cfg = TrainConfig(windows=8, epochs=1, batch=4)
    plain, again = _weights(cfg), _weights(cfg)
    one, one_again = _weights(replace(cfg, restart=1)), _weights(replace(cfg, restart=1))
    assert all(np.array_equal(a, b) for a, b in zip(plain, again, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(one, one_again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(plain, one, strict=True))


def test_the_restart_is_in_the_cache_key_and_restart_zero_keeps_it() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    cfg = TrainConfig()
    keys = {r: train.stage_key(replace(cfg, restart=r), 1, systems) for r in (0, 1, 2)}
    assert keys[0] == train.stage_key(cfg, 1, systems)
    assert len(set(keys.values())) == 3


def test_the_cli_restart_reaches_training_and_leaves_the_draw_alone(
    quick_cnn_argv: Callable[..., list[str]],
    synthetic_quick_work: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sip_bridge.cli import main

    drawn: list[Any] = []
    trained: list[tuple[TrainConfig, int]] = []
    real_draw = train.draw_windows

    def draw(*args: Any, **kwargs: Any) -> Any:
        windows, labels = real_draw(*args, **kwargs)
        drawn.append(windows.copy())
        return windows, labels

    def stop(windows: Any, labels: Any, cfg: TrainConfig, seed: int, *a: Any, **k: Any) -> Any:
        trained.append((cfg, seed))
        raise TrainingReachedError

    monkeypatch.setattr(train, "draw_windows", draw)
    monkeypatch.setattr(train, "train", stop)
    out = synthetic_quick_work / "unused-restart"
    for argv in (quick_cnn_argv(out, "--restart", "2"), quick_cnn_argv(out, "--restart", "3")):
        with pytest.raises(TrainingReachedError):
            main(argv)
    assert [(c.restart, s) for c, s in trained] == [(2, 0), (3, 0)]
    assert len(drawn) == 2 and np.array_equal(drawn[0], drawn[1])


def test_a_negative_restart_is_refused(
    quick_cnn_argv: Callable[..., list[str]],
    synthetic_quick_work: Path,
    stop_at_the_draw: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sip_bridge.cli import main

    assert main(quick_cnn_argv(synthetic_quick_work / "unused", "--restart", "-1")) == 1
    assert "--restart must be 0 or more" in capsys.readouterr().out
    assert stop_at_the_draw == []


def test_a_restart_build_installs_beside_the_seeds_own(
    quick_cnn_argv: Callable[..., list[str]], tmp_path: Path
) -> None:
    from detectors.model_store import ModelStore
    from sip_bridge.cli import main

    assert main(quick_cnn_argv(tmp_path, "--restart", "1")) == 0
    (model,) = ModelStore(tmp_path).installed()
    assert model.manifest.version.endswith("+s0.r1")
    assert "restart 1" in model.manifest.provenance
