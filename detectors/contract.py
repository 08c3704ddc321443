"""The detector contract (DESIGN §5): what a detector consumes and what it returns.

A detector declares its input once (``DetectorSpec``: leg roles, sample rate, window,
hop, minimum net speech, whether windows of many calls may share one batch) and scores
a batch of windows at a time (``Detector.run_batch``: float32 ``[batch, window]`` in,
``BatchOutput`` out). The runtime, not the detector, decides abstentions that need no
inference (paused, leg role, concealed audio, too little speech) and failures
(``unavailable``); every window ends as one frozen ``WindowResult``.

Model detectors are ONNX files described by a manifest (``detectors.manifest``);
signal detectors are plain numpy classes. Both satisfy the same Protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Abstention, Dimension, LegRole

FloatArray = npt.NDArray[np.float32]

VOICE_ROLES: frozenset[LegRole] = frozenset({LegRole.EXTERNAL})
"""Voice detectors (synthetic voice, speaker, replay) run on the external leg only."""

VOICE_DIMENSIONS: frozenset[Dimension] = frozenset(
    {
        Dimension.SYNTHETIC_VOICE,
        Dimension.KNOWN_FRAUDSTER,
        Dimension.VOICE_MISMATCH,
        Dimension.REPLAY,
    }
)
"""Dimensions about the caller's voice: masked where the external leg carries echo."""


@dataclass(frozen=True, slots=True)
class DetectorSpec:
    """What a detector consumes. ``roles``: legs it scores; a leg of another role is
    skipped if INTERNAL (never analysed for voice) and abstains ``leg_unknown`` if MIXED
    or UNKNOWN. Window and hop are in samples at ``sample_rate``."""

    name: str
    version: str
    dimension: Dimension
    sample_rate: int
    window: int
    hop: int
    min_net_speech_s: float = 0.0
    max_concealed_ratio: float = 0.2
    roles: frozenset[LegRole] = VOICE_ROLES
    batchable: bool = True
    threshold: float = 0.5
    embedding_dim: int = 0

    def __post_init__(self) -> None:
        if self.sample_rate <= 0 or self.window <= 0 or self.hop <= 0:
            raise ValueError(f"{self.name}: sample_rate, window and hop must be positive")
        if not 0.0 <= self.max_concealed_ratio <= 1.0:
            raise ValueError(f"{self.name}: max_concealed_ratio must be in [0, 1]")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"{self.name}: threshold must be in [0, 1]")

    @property
    def window_s(self) -> float:
        return self.window / self.sample_rate

    @property
    def hop_s(self) -> float:
        return self.hop / self.sample_rate


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """A detector's answer for a batch of B windows: scores in [0, 1] (float32 [B]),
    optionally embeddings [B, D] and per-window abstentions (None: scored)."""

    scores: FloatArray
    embeddings: FloatArray | None = None
    abstentions: tuple[Abstention | None, ...] | None = None


@runtime_checkable
class Detector(Protocol):
    """Scores windows. ``run_batch`` is called from a worker thread of the scheduler,
    at most ``max_inflight`` times concurrently per detector; it must not keep
    references to ``audio`` (the buffer is reused for the next batch)."""

    @property
    def spec(self) -> DetectorSpec: ...

    @property
    def provider(self) -> str:
        """Where it runs: an ONNX Runtime execution provider, or "numpy"."""
        ...

    def run_batch(self, audio: FloatArray) -> BatchOutput: ...

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        """Run once per batch shape before the process reports ready."""
        ...


@dataclass(frozen=True, slots=True)
class WindowQuality:
    """Jitter-buffer quality of the audio behind a window (travels with every score).
    Ratios are over the window's 2.5 ms units; ``net_speech_s`` is received audio above
    the speech-energy gate."""

    concealed_ratio: float = 0.0
    cng_ratio: float = 0.0
    missing_ratio: float = 0.0
    net_speech_s: float = 0.0
    late_packets: int = 0
    jitter_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class WindowKey:
    """Which audio a window is: call, leg, span (seconds from the leg's first frame)."""

    call_id: str
    leg_id: str
    role: LegRole
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One window's outcome for one detector: a score or an explicit abstention."""

    key: WindowKey
    detector: str
    model_version: str
    dimension: Dimension
    provider: str
    score: float | None
    threshold: float
    abstained: Abstention | None
    quality: WindowQuality
    reasons: tuple[str, ...] = ()
    embedding: FloatArray | None = None
    queue_wait_s: float = 0.0
    ready_at: float = 0.0  # monotonic time the window's last frame was pushed

    def __post_init__(self) -> None:
        if (self.score is None) == (self.abstained is None):
            raise ValueError("a window result has either a score or an abstention")
        if self.score is not None and not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score {self.score} outside [0, 1]")
