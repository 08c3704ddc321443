"""train-synthetic --arch aasist: the 8 kHz sinc front end covers 0-4 kHz, the 16 kHz
import's configurations are untouched, and a ``--quick`` build from the shared corpus gives
``callshield-aasist-8k`` on the CNN's window, an ONNX model that agrees with torch and
that the runtime loads, under a cache key of its own. The full model is never trained
here (``callshield models train-synthetic --arch aasist``, ~20 min)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.aasist.config import SAMPLE_RATE, VARIANTS, sinc_bank
from detectors.synthetic import aasist_net, train


def test_sinc_bank_spans_the_8k_band() -> None:
    cfg = aasist_net.CONFIG
    assert (cfg.sample_rate, cfg.nb_samp, cfg.sinc_taps) == (8000, train.WINDOW, 65)
    bank = sinc_bank(cfg.n_sinc, cfg.sinc_taps, cfg.sample_rate)[:, 0, :]
    freqs = np.fft.rfftfreq(4096, 1 / cfg.sample_rate)
    peaks = freqs[np.argmax(np.abs(np.fft.rfft(bank, 4096, axis=1)), axis=1)]
    assert np.all(np.diff(peaks) >= 0)  # mel-ordered filters
    assert peaks[0] < 150 and 3300 < peaks[-1] <= 4000  # up to Nyquist at 8 kHz
    assert np.sum(peaks < 1000) > np.sum(peaks > 3000)  # mel spacing: dense at the bottom
    # the imported 16 kHz networks keep their numerics (bank over 0-8 kHz)
    for v in VARIANTS.values():
        assert v.sample_rate == SAMPLE_RATE
    assert cfg.grid() == (16, 10)  # spectral x temporal nodes for a 3 s window


def test_cache_keys_never_mix_architectures() -> None:
    cnn = train.TrainConfig()
    keys = {train.stage_key(replace(cnn, arch=a), 1, ["espeak_en-us"]) for a in train.ARCHS}
    assert len(keys) == len(train.ARCHS)
    with pytest.raises(ValueError, match="unknown architecture"):
        train.new_model("resnet")


@pytest.fixture(scope="module")
def quick_aasist(
    tmp_path_factory: pytest.TempPathFactory, shared_dir: Path, synthetic_quick_work: Path
) -> Any:
    from detectors.synthetic.build import build

    root = tmp_path_factory.mktemp("train-aasist")
    cfg = train.TrainConfig(windows=32, epochs=1, batch=16)
    return build(  # work: the spoofs of every quick build, generated once
        root / "models", synthetic_quick_work, shared_dir / "data/speech", 0, quick=True, cfg=cfg,
        arch="aasist",
    )  # fmt: skip


def test_quick_aasist_build_manifest_and_onnx(quick_aasist: Any) -> None:
    import torch

    from detectors.manifest import sha256_file
    from detectors.onnx_detector import CPU, OnnxDetector, ProviderChoice
    from detectors.synthetic.build import AASIST_NAME, TOLERANCE

    inst, report = quick_aasist.installed, quick_aasist.report
    m = inst.manifest
    assert m.name == AASIST_NAME == "callshield-aasist-8k"
    assert m.dimension.value == "synthetic_voice" and "AASIST" in m.description
    assert "arch aasist" in m.provenance and report["arch"] == "aasist"
    assert (m.input.sample_rate, m.input.window, m.input.hop) == (8000, 24_000, 12_000)
    assert sha256_file(inst.model_path) == m.sha256
    assert report["onnx_max_abs_diff"] <= TOLERANCE
    work = Path(report["testset"]).parent
    assert list(work.glob("model-s0-quick-aasist-stage1-*.pt"))
    assert (work / "report-s0-quick-aasist.json").is_file()
    # the installed file, through the runtime's own session, against the torch module
    rng = np.random.default_rng(3)
    waves = (0.1 * rng.standard_normal((3, m.input.window))).astype(np.float32)
    det = OnnxDetector(m, inst.model_path, choice=ProviderChoice(CPU, "test"))
    with torch.no_grad():
        ref = quick_aasist.model(torch.from_numpy(waves)).numpy().reshape(-1)
    got = det.run_batch(waves).scores.reshape(-1)
    assert np.all((got >= 0) & (got <= 1))
    assert np.max(np.abs(got - ref)) <= TOLERANCE


def test_unknown_architecture_is_refused(tmp_path: Path, shared_dir: Path) -> None:
    from detectors.synthetic.build import BuildError, build

    with pytest.raises(BuildError, match="unknown architecture"):
        build(tmp_path / "m", tmp_path / "w", shared_dir / "data/speech", 0, True, arch="x")
