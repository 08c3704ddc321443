"""derive-speaker: our voice-encoder implementation converted from the resemblyzer
wheel's weights, checked against torch (1e-4) and Resemblyzer itself (cosine 0.999) on
real speech; the EER on 8 kHz G.711 speech of unseen speakers; the runtime stays
torch-free. Skipped only where the convert extra (torch, resemblyzer) is missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from detectors.speaker.evaluate import equal_error_rate, telephone_16k
from detectors.speaker.frontend import mel_matrix, mel_power_numpy, partial_plan

HAVE_CONVERT = all(importlib.util.find_spec(m) for m in ("torch", "resemblyzer"))
HAVE_LIBROSA = importlib.util.find_spec("librosa") is not None
needs_convert = pytest.mark.skipif(not HAVE_CONVERT, reason="convert extra not installed")


def test_partial_plan_matches_the_published_slicing() -> None:
    # 3 s: partials at frames 0, 77, 154, padded to (154 + 160) * 160 samples
    plan = partial_plan(48_000)
    assert plan.starts == (0, 77, 154) and plan.padded == 50_240
    one = partial_plan(16_000)  # shorter than a partial: one, zero-padded
    assert one.starts == (0,) and one.padded == 25_600


def test_eer_helper() -> None:
    assert equal_error_rate(np.array([0.9, 0.8]), np.array([0.1, 0.2])) == (0.0, 0.2) or (
        equal_error_rate(np.array([0.9, 0.8]), np.array([0.1, 0.2]))[0] == 0.0
    )
    rng = np.random.default_rng(0)
    eer, _ = equal_error_rate(rng.normal(1, 1, 20_000), rng.normal(-1, 1, 20_000))
    assert eer == pytest.approx(0.1587, abs=0.01)  # Φ(-1)


def test_telephone_path_keeps_length_and_level() -> None:
    t = np.arange(16_000) / 16_000
    x = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    y = telephone_16k(x, 16_000)
    assert y.size == x.size
    assert np.corrcoef(x[800:-800], y[800:-800])[0, 1] > 0.99


@pytest.mark.skipif(not HAVE_LIBROSA, reason="librosa (convert extra) not installed")
def test_front_end_matches_librosa() -> None:
    import librosa

    assert np.abs(mel_matrix() - librosa.filters.mel(sr=16000, n_fft=400, n_mels=40)).max() < 1e-8
    x = np.random.default_rng(1).standard_normal(20_000).astype(np.float32) * 0.1
    ref = librosa.feature.melspectrogram(y=x, sr=16000, n_fft=400, hop_length=160, n_mels=40).T
    mine = mel_power_numpy(x)
    assert mine.shape == ref.shape
    assert np.abs(mine - ref).max() <= 1e-5 * ref.max()


@pytest.fixture(scope="module")
def derived(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path):  # type: ignore[no-untyped-def]
    if not HAVE_CONVERT:
        pytest.skip("convert extra not installed")
    from detectors.speaker.deriver import derive_speaker

    speech = sorted((shared_dir / "data/speech/speechocean762/WAVE").glob("*/*.WAV"))[:4]
    out = tmp_path_factory.mktemp("models")
    return derive_speaker(out, reference_audio=speech, require_reference=HAVE_LIBROSA)


@needs_convert
def test_derived_model_verifies(derived) -> None:  # type: ignore[no-untyped-def]
    assert derived.max_abs_diff <= 1e-4
    assert derived.batch_diff <= 1e-5
    assert derived.parameters == 1_423_616  # 3-layer LSTM 256 + linear 256
    m = derived.installed.manifest
    assert m.output.embedding_dim == 256 and m.input.sample_rate == 16_000
    assert "Apache-2.0" in m.licence and "pretrained.pt" in m.provenance
    if HAVE_LIBROSA:
        assert derived.reference_clips >= 3
        assert derived.reference_cosine is not None and derived.reference_cosine >= 0.999


@needs_convert
def test_eer_on_g711_speech_of_unseen_speakers(derived, shared_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from detectors.speaker.evaluate import evaluate_speaker

    r = evaluate_speaker(
        derived.installed.model_path,
        derived.installed.manifest,
        shared_dir / "data/speech",
        datasets=("speechocean762", "cmu_arctic"),
        per_speaker=2,
    )
    assert r.speakers >= 150 and r.target_trials >= 150
    assert r.eer <= 0.05, r.as_dict()


@needs_convert
def test_runtime_runs_the_models_without_torch(derived, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The runtime path (detector runtime, ONNX detector, VAD, speaker eval) with torch
    made unimportable, in a fresh interpreter."""
    code = f"""
import sys
for m in ("torch", "resemblyzer", "librosa", "silero_vad"):
    sys.modules[m] = None  # any import of them now raises ImportError
import numpy as np
from pathlib import Path
import detectors.runtime, detectors.vad.silero, detectors.speaker.evaluate
from detectors.manifest import load_manifest
from detectors.onnx_detector import OnnxDetector
p = Path({str(derived.installed.manifest_path)!r})
m = load_manifest(p)
d = OnnxDetector(m, p.parent / m.file)
x = np.random.default_rng(0).standard_normal((2, m.input.window)).astype(np.float32)
out = d.run_batch(0.1 * x)
assert out.embeddings is not None and out.embeddings.shape == (2, 256)
assert np.allclose(np.linalg.norm(out.embeddings, axis=1), 1.0, atol=1e-4)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
