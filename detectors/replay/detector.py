"""The replay dimension's window detector: fingerprints external-leg windows at 8 kHz
(numpy only). It scores nothing by itself: each window's fingerprint travels in the
result's embedding slot (``fingerprint.to_vector``) to the replay stage
(``detectors.replay.stage``), which knows the call, matches the allowlist, the call's
own earlier audio and other calls', and replaces the result with a score or an
abstention. The fingerprint never leaves the stage."""

from __future__ import annotations

import numpy as np

from detectors.alert_schema import Dimension
from detectors.contract import BatchOutput, DetectorSpec, FloatArray
from detectors.replay.fingerprint import RATE, fingerprint, frames_for, to_vector

NAME = "replay_fp"
VERSION = "1"
WINDOW_S = 4.0
HOP_S = 2.0


def replay_spec(window_s: float = WINDOW_S, hop_s: float = HOP_S) -> DetectorSpec:
    return DetectorSpec(
        name=NAME,
        version=VERSION,
        dimension=Dimension.REPLAY,
        sample_rate=RATE,
        window=int(window_s * RATE),
        hop=int(hop_s * RATE),
        min_net_speech_s=1.0,
        max_concealed_ratio=0.2,
        threshold=0.5,
        embedding_dim=2 * (frames_for(int(window_s * RATE)) - 1),
    )


class ReplayFingerprinter:
    def __init__(self, spec: DetectorSpec | None = None) -> None:
        self._spec = spec or replay_spec()

    @property
    def spec(self) -> DetectorSpec:
        return self._spec

    @property
    def provider(self) -> str:
        return "numpy"

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        vectors = np.stack([to_vector(fingerprint(row)) for row in audio])
        return BatchOutput(np.zeros(audio.shape[0], np.float32), vectors.astype(np.float32))

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        rng = np.random.default_rng(0)
        for b in batch_sizes:
            self.run_batch((0.01 * rng.standard_normal((b, self._spec.window))).astype(np.float32))
