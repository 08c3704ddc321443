"""train-synthetic --arch cnn-phase: the phase-derivative channels (detectors/synthetic/
phase.py) on pure signals, where their values are known in closed form: a stationary
sinusoid at a bin centre has no instantaneous-frequency deviation and one between
centres the deviation its offset predicts; a click d samples after the frame centre has
the linear phase -2 pi d / n_fft per bin; silence gives zeros, not NaN. Then the network:
the CNN's state dict keeps its keys, the ONNX export agrees with torch, and a ``--quick``
build installs ``callshield-synthetic-phase-8k`` under a cache key of its own. The full
model is never trained here (``callshield models train-synthetic --arch cnn-phase``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.synthetic import phase, train
from detectors.synthetic.model import NetConfig, build_model, dft_kernels

N_FFT, HOP = NetConfig().n_fft, NetConfig().hop
BINS = N_FFT // 2 + 1


def channels(x: np.ndarray, gate: bool = True) -> np.ndarray:
    """[4, bins, T] phase channels of one waveform, through the model's DFT kernels."""
    import torch

    kern = torch.from_numpy(dft_kernels(N_FFT))
    spec = torch.nn.functional.conv1d(torch.from_numpy(x.astype(np.float32))[None, None], kern,
                                      stride=HOP)  # fmt: skip
    cos_w, sin_w = (torch.tensor(v).unsqueeze(1) for v in phase.advance(BINS, N_FFT, HOP))
    out = phase.phase_channels(spec[:, :BINS], spec[:, BINS:], cos_w, sin_w, gate=gate)
    result: np.ndarray = out[0].numpy()
    return result


def test_sinusoid_at_a_bin_centre_has_no_if_deviation() -> None:
    n = np.arange(8000)
    for k in (5, 20, 77):
        x = 0.3 * np.cos(2 * np.pi * k * n / N_FFT + 0.7)
        c = channels(x)
        assert np.allclose(c[0, k, 1:], 1.0, atol=1e-3)  # cos of the deviation
        assert np.allclose(c[1, k, 1:], 0.0, atol=1e-3)  # sin
        assert np.all(c[:2, :, 0] == 0)  # frame 0: no previous frame, padded


def test_sinusoid_between_centres_has_the_predicted_deviation() -> None:
    n, k, off = np.arange(8000), 20, 0.25  # a quarter bin above bin 20
    x = 0.3 * np.cos(2 * np.pi * (k + off) * n / N_FFT)
    c = channels(x, gate=False)
    want = 2 * np.pi * off * HOP / N_FFT  # the extra advance per hop
    got = np.arctan2(c[1, k, 1:], c[0, k, 1:])
    assert np.allclose(got, want, atol=1e-3)
    assert abs(want) > 0.4  # far from the centred case: the test can tell them apart


@pytest.mark.parametrize("d", [0, 5, -17])
def test_a_click_gives_a_linear_phase_across_frequency(d: int) -> None:
    t = 10  # the click lies only in frames near t; frame t holds it d after its centre
    x = np.zeros(4000)
    x[t * HOP + N_FFT // 2 + d] = 1.0
    c = channels(x, gate=False)
    got = np.arctan2(c[3, 1:, t], c[2, 1:, t])
    assert np.allclose(got, -2 * np.pi * d / N_FFT, atol=1e-4)  # the same in every bin
    assert np.all(c[2:, 0, :] == 0)  # bin 0: no lower bin, padded


def test_silence_is_zero_and_the_gate_is_level_free() -> None:
    assert np.all(channels(np.zeros(4000)) == 0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(8000) * np.hanning(8000)
    loud, quiet = channels(0.5 * x), channels(0.005 * x)
    assert np.allclose(loud, quiet, atol=1e-4)
    assert np.all(np.abs(loud) <= 1.0 + 1e-6)
    ungated = channels(0.5 * x, gate=False)
    # the gate shrinks only: quiet bins fade, the phasors keep their direction
    assert np.all(np.abs(loud) <= np.abs(ungated) + 1e-6)
    assert np.mean(np.hypot(loud[0], loud[1])) < np.mean(np.hypot(ungated[0], ungated[1]))


def test_the_cnn_is_unchanged_and_the_phase_net_exports() -> None:
    import torch

    from detectors.synthetic.build import TOLERANCE, export_onnx, max_diff, ort_session

    cnn = build_model()
    net = build_model(NetConfig(phase=True))
    assert not {"cos_w", "sin_w"} & set(cnn.state_dict())  # the CNN's cached dicts load
    assert set(net.state_dict()) - set(cnn.state_dict()) == {"cos_w", "sin_w"}
    assert net.body[0].in_channels == 5 and cnn.body[0].in_channels == 1
    torch.manual_seed(0)
    net.eval()
    n = np.arange(train.WINDOW)
    waves = np.stack([
        0.1 * np.random.default_rng(2).standard_normal(train.WINDOW),
        0.3 * np.cos(2 * np.pi * 20 * n / N_FFT),
        np.zeros(train.WINDOW),
    ]).astype(np.float32)  # fmt: skip
    session = ort_session(export_onnx(net))
    assert max_diff(net, session, waves) <= TOLERANCE
    keys = {train.stage_key(replace(train.TrainConfig(), arch=a), 1) for a in train.ARCHS}
    assert len(keys) == len(train.ARCHS)


@pytest.fixture(scope="module")
def quick_phase(
    tmp_path_factory: pytest.TempPathFactory, shared_dir: Path, synthetic_quick_work: Path
) -> Any:
    from detectors.synthetic.build import build

    root = tmp_path_factory.mktemp("train-phase")
    cfg = train.TrainConfig(windows=32, epochs=1, batch=16)
    return build(  # work: the spoofs of every quick build, generated once
        root / "models", synthetic_quick_work, shared_dir / "data/speech", 0, quick=True, cfg=cfg,
        arch="cnn-phase",
    )  # fmt: skip


def test_quick_phase_build_installs_its_own_model(quick_phase: Any) -> None:
    import torch

    from detectors.onnx_detector import CPU, OnnxDetector, ProviderChoice
    from detectors.synthetic.build import PHASE_NAME, TOLERANCE

    inst, report = quick_phase.installed, quick_phase.report
    m = inst.manifest
    assert m.name == PHASE_NAME == "callshield-synthetic-phase-8k"
    assert "arch cnn-phase" in m.provenance and "phase" in m.description
    assert report["arch"] == "cnn-phase" and report["onnx_max_abs_diff"] <= TOLERANCE
    work = Path(report["testset"]).parent
    assert list(work.glob("model-s0-quick-cnn-phase-stage1-*.pt"))
    rng = np.random.default_rng(3)
    waves = (0.1 * rng.standard_normal((3, m.input.window))).astype(np.float32)
    det = OnnxDetector(m, inst.model_path, choice=ProviderChoice(CPU, "test"))
    with torch.no_grad():
        ref = quick_phase.model(torch.from_numpy(waves)).numpy().reshape(-1)
    assert np.max(np.abs(det.run_batch(waves).scores.reshape(-1) - ref)) <= TOLERANCE
