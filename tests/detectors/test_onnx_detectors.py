"""ONNX Runtime detectors on the fixture models: provider choice, batch-1 vs batch-N
score invariance, score transforms, pre-warm, and the fixture marker."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest
from conftest import Built

from detectors import onnx_detector
from detectors.contract import Detector
from detectors.fixture_models import MARKER_HZ
from detectors.onnx_detector import OnnxDetector, probe_providers


def _batch(window: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, window)) * 0.05).astype(np.float32)


@pytest.mark.parametrize("which", ["tiny_aasist", "tiny_embedding", "vad_model"])
def test_batch_one_equals_batch_n(
    which: str, request: pytest.FixtureRequest, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(request.getfixturevalue(which))
    assert isinstance(det, Detector)
    x = _batch(det.spec.window, 5)
    together = det.run_batch(x)
    alone = [det.run_batch(x[i : i + 1]) for i in range(5)]
    np.testing.assert_allclose(
        together.scores, np.concatenate([a.scores for a in alone]), rtol=1e-5, atol=1e-6
    )
    assert together.scores.dtype == np.float32
    assert ((together.scores >= 0) & (together.scores <= 1)).all()
    if det.spec.embedding_dim:
        assert together.embeddings is not None
        emb = np.concatenate([a.embeddings for a in alone if a.embeddings is not None])
        np.testing.assert_allclose(together.embeddings, emb, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(together.embeddings, axis=1), 1, rtol=1e-5)


def test_marker_tone_raises_the_fixture_score(
    tiny_aasist: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(tiny_aasist)
    w = det.spec.window
    rng = np.random.default_rng(4)
    # speech-band signal at 8 kHz upsampled: nothing near 3.5 kHz
    speech = np.convolve(rng.standard_normal(w), np.hanning(31), "same").astype(np.float32)
    speech *= 0.1 / speech.std()
    tone = 0.05 * np.sin(2 * np.pi * MARKER_HZ * np.arange(w) / 16000)
    s = det.run_batch(np.stack([speech, speech + tone.astype(np.float32)]))
    assert s.scores[0] < 0.1 < 0.9 < s.scores[1]


def test_vad_fixture_tells_speech_from_silence(
    vad_model: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(vad_model)
    x = np.zeros((2, det.spec.window), np.float32)
    x[1] = _batch(det.spec.window, 1)[0]
    scores = det.run_batch(x).scores
    assert scores[0] < 0.01 and scores[1] > 0.99


def test_provider_probe_runs_once_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    onnx_detector._reset_probe_for_tests()
    with caplog.at_level(logging.INFO, logger="detectors.onnx_detector"):
        first = probe_providers()
        second = probe_providers()
    assert first is second
    lines = [r.getMessage() for r in caplog.records if "onnxruntime: using" in r.getMessage()]
    assert len(lines) == 1 and first.reason in lines[0]
    assert first.provider in ("CUDAExecutionProvider", "CPUExecutionProvider")


def test_warm_up_runs_every_batch_shape(
    tiny_embedding: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(tiny_embedding)
    seen: list[int] = []
    original = det.run_batch

    def spy(audio: np.ndarray) -> object:
        seen.append(audio.shape[0])
        return original(audio)

    det.run_batch = spy  # type: ignore[method-assign]
    det.warm_up((1, 2, 4, 8))
    assert seen == [1, 2, 4, 8]
