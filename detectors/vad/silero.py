"""Silero VAD on the 20 ms frames of every leg (DESIGN §5, speech_activity).

The model (``silero_vad.onnx`` of the ``silero-vad`` wheel, v5/v6 interface) takes:
  * ``input`` float32 [B, context + chunk]: a chunk of 256 samples at 8 kHz (512 at
    16 kHz) with the last 32 (64) samples of the leg's previous chunk prepended;
  * ``state`` float32 [2, B, 128]: the recurrent state, zeros at the start of a stream,
    replaced by ``stateN`` after every chunk;
  * ``sr`` int64 scalar: 8000 or 16000;
and returns ``output`` [B, 1], the speech probability of the chunk, and ``stateN``.

``SpeechActivity`` keeps, per leg, the pending samples (20 ms frames do not divide a
32 ms chunk), the context and the state; on every push it steps, in one batched ONNX
Runtime call, all legs that have a full chunk, gathering and scattering their state
rows (legs of different calls share the batch; their phases need not align). It
reports per window (32 chunks = 1.024 s at 8 kHz) the mean and max speech probability,
the speech seconds in the window and the leg's net speech seconds so far (chunks in
speech with hysteresis: on at ``threshold``, off below ``threshold - 0.15``), which the
runtime can use to gate other detectors (minimum net speech).

``SileroWindowDetector`` is the stateless ``Detector`` face for the scheduler: each
window starts from a zero state and the score is the mean speech probability.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import BatchOutput, DetectorSpec, FloatArray

STATE_SHAPE = (2, 128)  # [2, batch, 128]
CHUNK = {8000: 256, 16000: 512}
CONTEXT = {8000: 32, 16000: 64}
CHUNKS_PER_WINDOW = 32
HYSTERESIS = 0.15


class SileroVad:
    """An ONNX Runtime session of the Silero model and one batched step."""

    def __init__(self, model: Path | bytes, sample_rate: int = 8000, threads: int = 1) -> None:
        import onnxruntime as ort

        from detectors.onnx_detector import session_options

        if sample_rate not in CHUNK:
            raise ValueError(f"Silero VAD runs at 8000 or 16000 Hz, not {sample_rate}")
        self.sample_rate = sample_rate
        self.chunk = CHUNK[sample_rate]
        self.context = CONTEXT[sample_rate]
        source = model if isinstance(model, bytes) else str(model)
        self._session = ort.InferenceSession(
            source, session_options(threads), providers=["CPUExecutionProvider"]
        )
        self._sr = np.array(sample_rate, np.int64)

    def zero_state(self, batch: int) -> FloatArray:
        return np.zeros((STATE_SHAPE[0], batch, STATE_SHAPE[1]), np.float32)

    def step(self, x: FloatArray, state: FloatArray) -> tuple[FloatArray, FloatArray]:
        """x [B, context + chunk], state [2, B, 128] → (probability [B], new state)."""
        prob, new_state = self._session.run(
            ["output", "stateN"], {"input": x, "state": state, "sr": self._sr}
        )
        return np.asarray(prob, np.float32).reshape(-1), np.asarray(new_state, np.float32)

    def run_stream(self, audio: FloatArray) -> FloatArray:
        """Chunk probabilities of whole streams [B, samples] from a zero state (samples
        past the last full chunk are ignored)."""
        b, n = audio.shape
        state = self.zero_state(b)
        ctx = np.zeros((b, self.context), np.float32)
        probs = []
        for s in range(0, n - self.chunk + 1, self.chunk):
            chunk = audio[:, s : s + self.chunk]
            p, state = self.step(np.concatenate([ctx, chunk], axis=1), state)
            ctx = chunk[:, -self.context :]
            probs.append(p)
        return np.stack(probs, axis=1) if probs else np.zeros((b, 0), np.float32)


@dataclass(frozen=True, slots=True)
class SpeechWindow:
    leg_id: str
    start_s: float
    end_s: float
    probability: float  # mean chunk speech probability
    max_probability: float
    speech_s: float  # seconds of this window in speech
    net_speech_s: float  # the leg's speech seconds so far, this window included


@dataclass(slots=True)
class _LegState:
    row: int
    pending: list[FloatArray] = field(default_factory=list)
    pending_n: int = 0
    context: FloatArray | None = None
    chunks: int = 0
    speaking: bool = False
    net_speech_s: float = 0.0
    win_probs: list[float] = field(default_factory=list)
    win_speech: int = 0


class SpeechActivity:
    """Streaming Silero VAD over many legs (see the module docstring)."""

    def __init__(
        self,
        vad: SileroVad,
        threshold: float = 0.5,
        chunks_per_window: int = CHUNKS_PER_WINDOW,
        max_legs: int = 512,
    ) -> None:
        self.vad = vad
        self.threshold = threshold
        self.off_threshold = max(0.0, threshold - HYSTERESIS)
        self.chunks_per_window = chunks_per_window
        self.chunk_s = vad.chunk / vad.sample_rate
        self._state = vad.zero_state(max_legs)
        self._free = list(range(max_legs - 1, -1, -1))
        self._legs: dict[str, _LegState] = {}
        self.step_s = 0.0  # time spent in ONNX Runtime
        self.steps = 0
        self.chunks = 0

    def add_leg(self, leg_id: str) -> None:
        if leg_id in self._legs:
            return
        if not self._free:
            raise RuntimeError("SpeechActivity: no free leg rows")
        row = self._free.pop()
        self._state[:, row] = 0.0
        self._legs[leg_id] = _LegState(row)

    def remove_leg(self, leg_id: str) -> None:
        leg = self._legs.pop(leg_id, None)
        if leg is not None:
            self._free.append(leg.row)

    def net_speech_s(self, leg_id: str) -> float:
        return self._legs[leg_id].net_speech_s

    def push(self, frames: dict[str, npt.NDArray[Any]]) -> list[SpeechWindow]:
        """Append audio per leg (int16 PCM or float in [-1, 1], at the VAD's rate; any
        length, typically one 20 ms frame) and run every full chunk. Returns the windows
        that completed."""
        for leg_id, pcm in frames.items():
            leg = self._legs.get(leg_id)
            if leg is None:
                continue
            x = np.asarray(pcm)
            x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)
            leg.pending.append(x.reshape(-1))
            leg.pending_n += x.size
        out: list[SpeechWindow] = []
        chunk = self.vad.chunk
        while True:
            ready = [(lid, leg) for lid, leg in self._legs.items() if leg.pending_n >= chunk]
            if not ready:
                return out
            xs = np.empty((len(ready), self.vad.context + chunk), np.float32)
            for i, (_, leg) in enumerate(ready):
                buf = np.concatenate(leg.pending)
                ctx = leg.context if leg.context is not None else np.zeros(self.vad.context)
                xs[i, : self.vad.context] = ctx
                xs[i, self.vad.context :] = buf[:chunk]
                rest = buf[chunk:]
                leg.pending = [rest] if rest.size else []
                leg.pending_n = rest.size
                leg.context = buf[chunk - self.vad.context : chunk].copy()
            rows = np.array([leg.row for _, leg in ready], np.intp)
            t0 = time.perf_counter()
            probs, new_state = self.vad.step(xs, np.ascontiguousarray(self._state[:, rows]))
            self.step_s += time.perf_counter() - t0
            self.steps += 1
            self.chunks += len(ready)
            self._state[:, rows] = new_state
            for (lid, leg), p in zip(ready, probs, strict=True):
                w = self._account(lid, leg, float(p))
                if w is not None:
                    out.append(w)

    def _account(self, leg_id: str, leg: _LegState, p: float) -> SpeechWindow | None:
        if leg.speaking:
            leg.speaking = p >= self.off_threshold
        else:
            leg.speaking = p >= self.threshold
        if leg.speaking:
            leg.net_speech_s += self.chunk_s
            leg.win_speech += 1
        leg.chunks += 1
        leg.win_probs.append(p)
        if len(leg.win_probs) < self.chunks_per_window:
            return None
        end = leg.chunks * self.chunk_s
        w = SpeechWindow(
            leg_id=leg_id,
            start_s=end - len(leg.win_probs) * self.chunk_s,
            end_s=end,
            probability=float(np.mean(leg.win_probs)),
            max_probability=float(np.max(leg.win_probs)),
            speech_s=leg.win_speech * self.chunk_s,
            net_speech_s=leg.net_speech_s,
        )
        leg.win_probs = []
        leg.win_speech = 0
        return w


class SileroWindowDetector:
    """The ``Detector`` face: a window of ``chunks_per_window`` chunks scored from a zero
    state, score = mean chunk speech probability (batchable across legs and calls)."""

    def __init__(
        self,
        model: Path | bytes,
        version: str,
        sample_rate: int = 8000,
        chunks_per_window: int = CHUNKS_PER_WINDOW,
        threshold: float = 0.5,
    ) -> None:
        self.vad = SileroVad(model, sample_rate)
        window = self.vad.chunk * chunks_per_window
        self._spec = DetectorSpec(
            name="silero-vad",
            version=version,
            dimension=Dimension.SPEECH_ACTIVITY,
            sample_rate=sample_rate,
            window=window,
            hop=window,
            max_concealed_ratio=1.0,
            roles=frozenset({LegRole.EXTERNAL, LegRole.MIXED, LegRole.UNKNOWN}),
            threshold=threshold,
        )

    @property
    def spec(self) -> DetectorSpec:
        return self._spec

    @property
    def provider(self) -> str:
        return "cpu"

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        probs = self.vad.run_stream(np.asarray(audio, np.float32))
        return BatchOutput(scores=np.clip(probs.mean(axis=1), 0.0, 1.0).astype(np.float32))

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        for b in batch_sizes:
            self.run_batch(np.zeros((b, self._spec.window), np.float32))


def cpu_ms_per_window(model: Path | bytes, runs: int = 3) -> float:
    """Median wall time (ms) of one batch-1 window (32 chunks, 1.024 s at 8 kHz) on
    one thread, as ``callshield models list`` reports it for other models."""
    det = SileroWindowDetector(model, "cost")
    audio = (1e-3 * np.random.default_rng(0).standard_normal((1, det.spec.window))).astype(
        np.float32
    )
    det.run_batch(audio)
    times = []
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        det.run_batch(audio)
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)
