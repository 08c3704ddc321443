"""VAD gating (DESIGN §5, speech_activity gates the others): with the Silero model
installed, a window's net speech is received audio above the energy gate *and* in a
Silero speech segment, so ``too_little_speech`` is decided on real speech, not on
noise, tones or music that happen to be loud.

The frame bank, when ``bank.vad`` is set, writes every tick's 20 ms frame of every
active leg (zeros for a leg missing from the pull) into this gate's 8 kHz ring, one
vectorised copy on the playout thread. A worker thread steps the model over every
leg that has a full 32 ms chunk, all such legs in one batched ONNX Runtime call
(their phases need not align), with the leg's recurrent state and context, and marks
each frame whose midpoint falls in a chunk in speech (hysteresis: on at
``threshold``, off below ``threshold - 0.15``). ``settled`` says up to which tick a
leg's marks are final; the bank cuts a window that needs net speech only then (at
most one chunk plus ``poll_s`` plus one batch later than the audio). The worker wakes
every ``poll_s`` (40 ms), not per tick, so every leg has a chunk ready and the first
step carries all of them (``callshield bench capacity --tick-jitter --vad-gate``
reports legs per step and ms per leg-second).

Cost (``step_s`` / ``chunks``): see tests/detectors/test_vad_gate.py, which prints the
measured ms per leg-second of audio and per batched step.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.vad.silero import HYSTERESIS, SileroVad

FRAME = 160  # 20 ms at 8 kHz


class VadGate:
    def __init__(
        self,
        vad: SileroVad,
        max_rows: int,
        ring_frames: int = 1024,
        threshold: float = 0.5,
        poll_s: float = 0.04,
    ) -> None:
        if vad.sample_rate != 8000:
            raise ValueError("the VAD gate runs Silero at 8 kHz (the frames' rate)")
        self.vad = vad
        self.threshold = threshold
        self.off_threshold = max(0.0, threshold - HYSTERESIS)
        self.ring_frames = ring_frames
        self._audio = np.zeros((max_rows, ring_frames * FRAME), np.float32)
        self._marks = np.zeros((max_rows, ring_frames), bool)
        self._state = vad.zero_state(max_rows)
        self._first = np.zeros(max_rows, np.int64)  # bank tick of the leg's first frame
        self._written = np.zeros(max_rows, np.int64)  # leg samples written
        self._done = np.zeros(max_rows, np.int64)  # leg chunks processed
        self._speaking = np.zeros(max_rows, bool)
        self._active = np.zeros(max_rows, bool)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._poll_s = poll_s
        self.step_s = 0.0
        self.steps = 0
        self.chunks = 0
        self._thread = threading.Thread(target=self._run, name="vad-gate", daemon=True)
        self._thread.start()

    # ---- playout thread -------------------------------------------------------------

    def reset(self, row: int, first_tick: int) -> None:
        with self._lock:
            self._first[row] = first_tick
            self._written[row] = 0
            self._done[row] = 0
            self._speaking[row] = False
            self._marks[row] = False
            self._state[:, row] = 0.0
            self._active[row] = True

    def remove(self, row: int) -> None:
        with self._lock:
            self._active[row] = False

    def write(self, rows: npt.NDArray[np.intp], tick: int, x: npt.NDArray[np.float32]) -> None:
        """One frame [n, 160] in [-1, 1] of ``rows`` at bank tick ``tick``."""
        col = tick % self.ring_frames
        self._audio[rows, col * FRAME : (col + 1) * FRAME] = x
        self._written[rows] += FRAME

    # ---- readers (playout thread) ---------------------------------------------------

    def settled(self, row: int) -> int | None:
        """The bank tick before which this row's marks are final (None: not gated)."""
        if not self._active[row]:
            return None
        done_samples = int(self._done[row]) * self.vad.chunk
        # frame f is final once the chunk holding its midpoint is processed
        frames = max(0, (done_samples - FRAME // 2 + FRAME - 1) // FRAME)
        return int(self._first[row]) + frames

    def marks(self, row: int, first_tick: int, n_ticks: int) -> npt.NDArray[np.bool_] | None:
        """Which of the bank ticks ``first_tick ..`` of this row are in speech (None: the
        row is not gated, e.g. an agent leg)."""
        if not self._active[row]:
            return None
        idx = np.arange(first_tick, first_tick + n_ticks) % self.ring_frames
        return np.asarray(self._marks[row, idx], bool)

    # ---- worker ---------------------------------------------------------------------

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(self._poll_s)
            self._wake.clear()
            while not self._closing and self.step_once():
                pass

    def step_once(self) -> bool:
        """One batched step over every leg with a full chunk; False when none had one."""
        chunk, ctx = self.vad.chunk, self.vad.context
        ring = self.ring_frames * FRAME
        with self._lock:
            rows = np.flatnonzero(self._active & (self._written >= (self._done + 1) * chunk))
            if rows.size == 0:
                return False
            start = self._done[rows] * chunk  # leg samples
            base = self._first[rows] * FRAME + start
            idx = (base[:, None] + np.arange(-ctx, chunk)[None, :]) % ring
            x = self._audio[rows[:, None], idx]
            x[self._done[rows] == 0, :ctx] = 0.0  # no context before the first chunk
            state = np.ascontiguousarray(self._state[:, rows])
        t0 = time.perf_counter()
        prob, new_state = self.vad.step(x, state)
        self.step_s += time.perf_counter() - t0
        self.steps += 1
        self.chunks += int(rows.size)
        with self._lock:
            live = self._active[rows] & (self._done[rows] * chunk == start)  # not reset
            rows, prob, new_state = rows[live], prob[live], new_state[:, live]
            speaking = np.where(
                self._speaking[rows], prob >= self.off_threshold, prob >= self.threshold
            )
            self._speaking[rows] = speaking
            self._state[:, rows] = new_state
            c0 = self._done[rows] * chunk
            for r, s0, sp in zip(rows.tolist(), c0.tolist(), speaking.tolist(), strict=True):
                f0 = max(0, -(-(s0 - FRAME // 2) // FRAME))  # first frame midpoint >= s0
                f1 = -(-(s0 + chunk - FRAME // 2) // FRAME)  # frames with midpoint < s0+chunk
                first = int(self._first[r])
                self._marks[r, (first + np.arange(f0, f1)) % self.ring_frames] = sp
            self._done[rows] += 1
        return True


def gate_from_store(models_dir: Path, max_rows: int, ring_frames: int) -> VadGate | None:
    """The gate on the installed Silero model (``callshield models install-vad``), or
    None where it is not installed (net speech then comes from the energy gate)."""
    from detectors.model_store import ModelStore
    from detectors.vad.install import NAME

    try:
        found = ModelStore(models_dir).get(NAME)
    except (LookupError, ValueError):
        return None
    return VadGate(SileroVad(found.model_path), max_rows, ring_frames)
