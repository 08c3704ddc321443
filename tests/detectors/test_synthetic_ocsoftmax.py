"""The one-class softmax head of ``train-synthetic --loss ocsoftmax`` (``ocsoftmax.py``):
the loss pulls bona fide scores above one margin and pushes spoofs below the other, a few
optimiser steps on it separate two classes the head has never seen apart, the head wraps
both networks and exports to ONNX within the build's tolerance with its output in [0, 1],
the loss is in the training cache key (the cross-entropy keys unchanged), and a quick
build from the shared corpus through the CLI trains, verifies and installs a one-class
model."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from detectors.synthetic import build, ocsoftmax, train
from detectors.synthetic.train import TrainConfig


def test_loss_pulls_bona_fide_up_and_pushes_spoof_down() -> None:
    import torch

    cos = torch.tensor([0.95, 0.5, -0.5, 0.95, 0.5, -0.5])
    y = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    per = [float(ocsoftmax.loss(cos[i : i + 1], y[i : i + 1])) for i in range(6)]
    # bona fide above m0 costs little, below it much; spoof the other way round, at m1
    assert per[0] < 0.5 < per[1] < per[2]
    assert per[5] < 0.01 < per[4] < per[3]
    want = np.log1p(np.exp(ocsoftmax.ALPHA * (ocsoftmax.MARGIN_BONAFIDE - 0.5)))
    assert per[1] == pytest.approx(want, rel=1e-5)
    assert float(ocsoftmax.loss(cos, y)) == pytest.approx(np.mean(per), rel=1e-5)
    grad_in = cos.clone().requires_grad_()
    ocsoftmax.loss(grad_in, y).backward()
    assert grad_in.grad is not None
    assert bool(torch.all(grad_in.grad[:3] <= 0)) and bool(torch.all(grad_in.grad[3:] >= 0))


def test_a_few_steps_separate_two_classes() -> None:
    """A linear embedding of two Gaussian clouds, scored against the learnt centre: the
    loss falls and the bona fide cloud ends above the spoof one."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Linear(nn.Module):
        embed_dim = 8

        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 8)

        def embed(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.lin(x)
            return out

    model = ocsoftmax.wrap(Linear())
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(1.0, 1.0, (64, 16)), rng.normal(-1.0, 1.0, (64, 16))])
    xs = torch.from_numpy(x.astype(np.float32))
    y = torch.cat([torch.zeros(64), torch.ones(64)])
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = ocsoftmax.loss(model.cosine(xs), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]
    with torch.no_grad():
        p = model(xs).squeeze(1).numpy()
    assert np.all((p >= 0) & (p <= 1))
    assert p[64:].min() > p[:64].max()  # every spoof scores above every bona fide


@pytest.mark.parametrize("arch", ["cnn", "aasist-lite"])
def test_the_head_wraps_each_network_and_exports(arch: str) -> None:
    import torch

    torch.manual_seed(0)
    model = train.new_model(arch, "ocsoftmax")
    session = build.ort_session(build.export_onnx(model))
    waves = (0.1 * np.random.default_rng(3).standard_normal((3, train.WINDOW))).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(waves)).numpy()
        cos = model.cosine(torch.from_numpy(waves)).numpy()
    (got,) = session.run(None, {build.INPUT_NAME: waves})
    assert got.shape == (3, 1) and np.all((got >= 0) & (got <= 1))
    assert float(np.max(np.abs(got - ref))) <= build.TOLERANCE
    assert np.allclose(ref[:, 0], (1 - cos) / 2, atol=1e-6)
    state = model.state_dict()
    assert "center" in state and train.from_state(state, arch, "ocsoftmax") is not None
    with pytest.raises(ValueError, match="unknown loss"):
        train.new_model(arch, "hinge")


def test_the_loss_is_in_the_cache_key_and_old_keys_are_unchanged() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32"]
    # the key the default recipe's cached state dicts were saved under before --loss
    assert train.stage_key(build.LITE_TRAIN, 1, systems) == "a6e0bb121b"
    oc = replace(build.LITE_TRAIN, loss="ocsoftmax")
    assert train.stage_key(oc, 1, systems) not in ("a6e0bb121b",)
    assert train.stage_key(replace(TrainConfig(), loss="ocsoftmax"), 1, systems) != (
        train.stage_key(TrainConfig(), 1, systems)
    )


def test_a_quick_one_class_build_through_the_cli(
    quick_cnn_argv: Callable[..., list[str]],
    synthetic_quick_work: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The quick CNN recipe with ``--loss ocsoftmax``: it trains a new stage (never the
    cross-entropy one cached beside it), verifies ONNX against torch and installs it."""
    from sip_bridge.cli import main

    out = tmp_path / "models"
    argv = quick_cnn_argv(out, "--loss", "ocsoftmax")
    before = set(synthetic_quick_work.glob("model-s0-quick-stage1-*.pt"))
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "ONNX vs torch" in captured.out and "using the cached state dict" not in captured.err
    assert len(set(synthetic_quick_work.glob("model-s0-quick-stage1-*.pt")) - before) == 1
    report = json.loads((synthetic_quick_work / "report-s0-quick.json").read_text())
    assert report["config"]["loss"] == "ocsoftmax"
    assert report["onnx_max_abs_diff"] <= build.TOLERANCE
    (manifest,) = out.rglob("*.manifest.json")
    assert "one-class softmax loss" in manifest.read_text()
