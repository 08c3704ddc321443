"""Fixtures for the detector runtime tests: tiny fixture models (built once per session,
never downloaded), helpers to drive a frame bank, and real speech when shared/ has it."""

from __future__ import annotations

import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from detectors.fixture_models import aasist_fixture, embedding_fixture, vad_fixture
from detectors.manifest import ModelManifest
from detectors.onnx_detector import OnnxDetector

Built = tuple[bytes, ModelManifest]


@pytest.fixture(scope="session")
def tiny_aasist() -> Built:
    return aasist_fixture(tiny=True)


@pytest.fixture(scope="session")
def tiny_embedding() -> Built:
    return embedding_fixture(tiny=True)


@pytest.fixture(scope="session")
def vad_model() -> Built:
    return vad_fixture()


@pytest.fixture(scope="session")
def make_detector() -> Callable[[Built], OnnxDetector]:
    def make(built: Built) -> OnnxDetector:
        data, manifest = built
        return OnnxDetector(manifest, data)

    return make


@pytest.fixture(scope="session")
def speech_8k(shared_dir: Path) -> npt.NDArray[np.int16]:
    """About 60 s of real 8 kHz speech (the Asterisk prompts in shared/)."""
    folder = shared_dir / "data/speech/asterisk_prompts/en"
    files = sorted(folder.glob("*.wav"))
    if not files:
        pytest.skip(f"no speech in {folder}")
    chunks, total = [], 0
    for f in files:
        with wave.open(str(f)) as w:
            if w.getframerate() != 8000 or w.getsampwidth() != 2 or w.getnchannels() != 1:
                continue
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
        chunks.append(pcm)
        total += pcm.size
        if total >= 60 * 8000:
            break
    return np.concatenate(chunks)


@pytest.fixture(scope="session")
def prompt_utterances(shared_dir: Path) -> list[npt.NDArray[np.float32]]:
    """Every Asterisk prompt in shared/ at 8 kHz of at least 2 s, in file order, as
    float32 in [-1, 1): real utterances of one speaker, different text."""
    out = []
    for path in sorted((shared_dir / "data/speech/asterisk_prompts/en").glob("*.wav")):
        with wave.open(str(path)) as w:
            if (w.getframerate(), w.getsampwidth(), w.getnchannels()) != (8000, 2, 1):
                continue
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        if pcm.size >= 2 * 8000:
            out.append(pcm.astype(np.float32) / 32768.0)
    return out


def voice_like(seconds: float, seed: int = 0, level: float = 3000.0) -> npt.NDArray[np.int16]:
    """A speech-energy signal (band-limited noise bursts), for tests without shared/."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 8000)
    x = np.convolve(rng.standard_normal(n), np.hanning(9), mode="same")
    return np.clip(x * level, -32768, 32767).astype(np.int16)
