"""The piper spoof generator is a function of its seed: VITS draws noise inside the ONNX
graph (RandomNormalLike), which ONNX Runtime seeds when a session is created, so one
cached session gave different audio for the same file on every run and two
`train-synthetic --seed 0` builds trained on different spoofs. Real synthesis with the
joe voice (the convert extra, as in CI)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from detectors.synthetic import generators

TEXT = "Please hold while I transfer your call to the billing department."


def _samples(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def test_same_seed_same_audio_other_seed_other_audio(tmp_path: Path) -> None:
    (joe,) = [s for s in generators.SYSTEMS if s.family == "piper"]
    a, b, c = (tmp_path / f"{n}.wav" for n in "abc")
    generators.tts(joe, TEXT, a, seed=7)
    generators.tts(joe, TEXT, c, seed=8)  # in between: a cached generator would move on
    generators.tts(joe, TEXT, b, seed=7)
    sa, sb, sc = _samples(a), _samples(b), _samples(c)
    assert sa.size > 8000 and np.array_equal(sa, sb)
    assert sa.size != sc.size or not np.array_equal(sa, sc)
