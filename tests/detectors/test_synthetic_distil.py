"""``train-synthetic --distil K``: one network trained on the recipe's windows towards its
labels mixed with the fused P(spoof) of the recipe's restarts 0 .. K-1 (distil.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.eval import fusion_study
from detectors.synthetic import distil, train
from detectors.synthetic.train import TrainConfig


def test_the_student_seed_is_none_of_its_teachers() -> None:
    teachers = {train.restart_seed(s, r) for s in (0, 1) for r in range(4)}
    students = {distil.seed(s, k) for s in (0, 1) for k in (2, 3)}
    assert len(students) == 4 and not students & teachers
    with pytest.raises(ValueError):
        distil.seed(0, 1)


def test_targets_mix_the_label_with_the_teachers() -> None:
    labels = np.array([0.0, 1.0, 1.0], np.float32)
    teacher = np.array([0.2, 0.9, 0.1], np.float32)
    got = distil.targets(labels, teacher)
    assert np.allclose(got, (1 - distil.WEIGHT) * labels + distil.WEIGHT * teacher)
    assert got.dtype == np.float32 and 0.0 < distil.WEIGHT < 1.0
    with pytest.raises(ValueError):
        distil.targets(labels, teacher[:2])


def test_the_teachers_are_fused_as_fuse_synthetic_fuses_two_models() -> None:
    import torch

    torch.manual_seed(3)
    a, b = train.new_model("cnn").eval(), train.new_model("cnn").eval()

    def scorer(m: Any) -> Callable[[np.ndarray], np.ndarray]:
        def score(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                out: np.ndarray = m(torch.from_numpy(x)).numpy().reshape(-1)
            return out

        return score

    rng = np.random.default_rng(2)
    windows = (rng.standard_normal((5, train.WINDOW)) * 4000).astype(np.int16)
    x = windows.astype(np.float32) / 32768.0
    pa, pb = scorer(a)(x), scorer(b)(x)
    assert not np.allclose(pa, pb)
    want = fusion_study.fuse(pa, pb, "logit", 0.5)
    said: list[str] = []
    got = distil.teacher_p([scorer(a), scorer(b)], windows, said.append)
    assert got.dtype == np.float32 and np.allclose(got, want, atol=1e-6)
    assert said == ["  teachers scored 5/5 windows"]
    assert np.allclose(distil.teacher_p([scorer(a)], windows), pa, atol=1e-6)
    with pytest.raises(ValueError):
        distil.teacher_p([], windows)


def test_distil_is_in_the_cache_key_and_zero_keeps_it() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    cfg = TrainConfig()
    keys = {k: train.stage_key(replace(cfg, distil=k), 1, systems) for k in (0, 2, 3)}
    assert keys[0] == train.stage_key(cfg, 1, systems)
    assert len(set(keys.values())) == 3
    assert train.stage_key(replace(cfg, restart=1), 1, systems) not in keys.values()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--distil", "1"), "--distil takes 2 teachers or more"),
        (("--distil", "2", "--restart", "1"), "does not take --restart"),
        (("--distil", "2", "--loss", "ocsoftmax"), "need --loss bce"),
    ],
)
def test_distil_combinations_are_refused_before_the_draw(
    refused: Callable[..., str], extra: tuple[str, ...], message: str
) -> None:
    assert message in refused(*extra)


def test_a_distilled_build_trains_its_teachers_then_a_student_on_their_targets(
    quick_cnn_argv: Callable[..., list[str]],
    synthetic_quick_work: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from detectors.model_store import ModelStore
    from sip_bridge.cli import main

    real_train = train.train
    seen: list[tuple[TrainConfig, np.ndarray, dict[str, Any]]] = []

    def record(windows: Any, labels: Any, cfg: TrainConfig, seed: int, *a: Any, **k: Any) -> Any:
        seen.append((cfg, np.asarray(labels).copy(), k))
        return real_train(windows, labels, cfg, seed, *a, **k)

    monkeypatch.setattr(train, "train", record)
    work = tmp_path / "work"  # its own cache: every stage trains here
    argv = quick_cnn_argv(tmp_path / "models", "--distil", "2")
    argv[argv.index("--work") + 1] = str(work)
    assert main(argv) == 0
    # the quick recipe's second stage continues from the student, on its own windows
    stages = [(c.restart, c.distil, k.get("init") is not None) for c, _, k in seen]
    assert stages == [(0, 0, False), (1, 0, False), (0, 2, False), (0, 2, True)]
    hard, soft = seen[0][1], seen[2][1]
    assert set(np.unique(hard)) <= {0.0, 1.0}
    assert not np.array_equal(hard, soft)  # the student learns the teachers' view too
    assert np.all(np.abs(soft - hard) <= distil.WEIGHT + 1e-6)
    (model,) = ModelStore(tmp_path / "models").installed()
    assert model.manifest.version.endswith("+s0.d2")
    assert "distilled from restarts 0-1" in model.manifest.provenance
    # the teachers are cached as the restart builds cache them: a second run trains nothing
    assert sorted(p.name.split("-stage1-")[0] for p in work.glob("model-*-stage1-*.pt")) == [
        "model-s0-quick",
        "model-s0-quick-d2",
        "model-s0-quick-r1",
    ]
    seen.clear()
    assert main(argv) == 0
    assert seen == []
