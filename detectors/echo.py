"""The echo gate (DESIGN §2): external-leg audio that is the internal leg's audio
leaking back (the agent's voice or the IVR's prompts through a caller's speakerphone)
is masked for the voice detectors.

Fed on the playout thread with every tick's frames (the same batch pull the frame bank
gets), it keeps, per registered leg, a short ring of band envelopes: each 10 ms, the
amplitude in four telephone bands (300-700, 700-1200, 1200-2000, 2000-3400 Hz) from one
80-point FFT. Every ``every_ticks`` ticks, for each call, each external leg's last
``span_s`` of envelopes is correlated (Pearson, per band, averaged) with the call's
internal leg(s) at every lag from 0 to ``max_lag_s`` (the external leg can only lag).
When the best lag's correlation reaches ``threshold``, the external leg is no louder
than the reference allows (``max_gain``), and both carry energy, the span is marked
echo. The frame bank then abstains a voice detector's window (``echo``) when at least
``share`` of its speech units lie in marked frames.

The internal leg is only an echo reference here: its envelopes live in a ring a few
seconds long, are never embedded, fingerprinted or stored, and go with the leg. Cost:
one FFT of 2 x 80 points per leg and tick, and per call a (lags x bands x steps)
correlation (51 x 4 x 100) every 200 ms.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

RATE = 8000
STEP = 80  # 10 ms
STEPS_PER_TICK = 2
LOW_HZ, HIGH_HZ = 300.0, 3500.0
ENERGY_FLOOR = 10 ** (-50 / 20)  # band-amplitude floor for "carries energy" (dBFS-ish)

Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class EchoConfig:
    max_lag_s: float = 0.5
    bands: int = 16
    span_s: float = 1.0
    every_ticks: int = 10  # 200 ms
    threshold: float = 0.7  # per-band and whole-pattern correlation at the best lag
    min_activity: float = 0.3  # share of steps within 30 dB of the span's loudest
    max_gain: float = 1.5  # external envelope RMS / reference RMS at the lag
    share: float = 0.5  # of a window's speech units in echo frames -> abstain
    ring_frames: int = 1024  # echo marks kept per leg (20 ms frames)


@dataclass
class EchoStats:
    evaluations: int = 0
    echo_spans: int = 0
    frames_marked: int = 0


@dataclass
class _Leg:
    call_id: str
    reference: bool
    slot: int


@dataclass
class _Calls:
    targets: dict[str, list[int]] = field(default_factory=dict)  # call -> stream ids
    refs: dict[str, list[int]] = field(default_factory=dict)


class EchoGate:
    def __init__(self, config: EchoConfig | None = None, max_legs: int = 1024) -> None:
        self.config = cfg = config or EchoConfig()
        self.max_lag = round(cfg.max_lag_s * 100)
        self.span = round(cfg.span_s * 100)
        self.ring = 2 * (self.max_lag + self.span + cfg.every_ticks * STEPS_PER_TICK)
        bins = np.fft.rfftfreq(STEP, 1.0 / RATE)
        edges = np.linspace(LOW_HZ, HIGH_HZ, cfg.bands + 1)
        self._bands = np.zeros((bins.size, cfg.bands), np.float32)
        for b in range(cfg.bands):
            self._bands[(bins >= edges[b]) & (bins < edges[b + 1]), b] = 1.0
        self._win = np.hanning(STEP).astype(np.float32)
        nb = self._bands.shape[1]
        self._env = np.zeros((max_legs, self.ring, nb), np.float32)
        self._marks = np.zeros((max_legs, cfg.ring_frames), bool)
        self._legs: dict[int, _Leg] = {}
        self._free = list(range(max_legs - 1, -1, -1))
        self._calls = _Calls()
        self._ids: npt.NDArray[np.int32] | None = None
        self._slots = np.zeros(0, np.intp)
        self._lock = threading.Lock()  # legs vs the tick; marks are read lock-free
        self.tick = 0
        self._evaluated = -1  # the last tick evaluated
        self._quiet: set[str] = set()  # calls whose references were silent at the last one
        self.stats = EchoStats()

    # ---- legs (any thread) ----------------------------------------------------------
    def add_target(self, call_id: str, stream_id: int) -> None:
        """An external leg whose windows the gate may mask."""
        self._add(call_id, stream_id, reference=False)

    def add_reference(self, call_id: str, stream_id: int) -> None:
        """An internal leg: the echo reference (never analysed, never stored)."""
        self._add(call_id, stream_id, reference=True)

    def _add(self, call_id: str, stream_id: int, reference: bool) -> None:
        with self._lock:
            if stream_id in self._legs or not self._free:
                return
            slot = self._free.pop()
            self._env[slot] = 0.0
            self._marks[slot] = False
            self._legs[stream_id] = _Leg(call_id, reference, slot)
            table = self._calls.refs if reference else self._calls.targets
            table.setdefault(call_id, []).append(stream_id)
            self._ids = None

    def remove(self, stream_id: int) -> None:
        with self._lock:
            leg = self._legs.pop(stream_id, None)
            if leg is None:
                return
            self._free.append(leg.slot)
            table = self._calls.refs if leg.reference else self._calls.targets
            sids = table.get(leg.call_id, [])
            if stream_id in sids:
                sids.remove(stream_id)
            if not sids:
                table.pop(leg.call_id, None)
            self._ids = None

    def legs(self) -> dict[int, tuple[str, bool]]:
        return {sid: (leg.call_id, leg.reference) for sid, leg in self._legs.items()}

    # ---- the tick (playout thread) ----------------------------------------------------
    def push(self, ids: npt.NDArray[np.int32], pcm: npt.NDArray[np.int16], tick: int) -> None:
        """One 20 ms frame of every leg in ``ids`` written at bank tick ``tick``."""
        with self._lock:
            self.tick = tick
            if not self._legs:
                return
            if self._ids is None or not np.array_equal(ids, self._ids):
                self._ids = ids.copy()
                self._slots = np.array(
                    [self._legs[int(i)].slot if int(i) in self._legs else -1 for i in ids],
                    np.intp,
                )
            keep = self._slots >= 0
            col = (tick * STEPS_PER_TICK) % self.ring
            active = [leg.slot for leg in self._legs.values()]
            self._env[active, col : col + STEPS_PER_TICK] = 0.0
            self._marks[active, tick % self.config.ring_frames] = False
            if keep.any():
                x = pcm[keep, : STEP * STEPS_PER_TICK].astype(np.float32) * (1.0 / 32768.0)
                frames = x.reshape(-1, STEPS_PER_TICK, STEP) * self._win
                spec = np.fft.rfft(frames, axis=2)
                power = (spec.real**2 + spec.imag**2).astype(np.float32)
                env = np.sqrt(power @ self._bands) / STEP
                self._env[self._slots[keep], col : col + STEPS_PER_TICK] = env
            if (tick + 1) % self.config.every_ticks == 0:
                self._evaluate(tick)
                self._evaluated = tick

    def _evaluate(self, tick: int) -> None:
        cfg = self.config
        end = ((tick + 1) * STEPS_PER_TICK) % self.ring  # one past the newest step
        quiet: set[str] = set()
        for call_id, targets in self._calls.targets.items():
            refs = self._calls.refs.get(call_id)
            if not refs:
                continue
            recent = self.span + self.max_lag
            if all(
                float(self._take(self._legs[r].slot, end, recent).max()) < ENERGY_FLOOR
                for r in refs
            ):
                quiet.add(call_id)
                continue
            for sid in targets:
                t = self._legs[sid].slot
                x = self._take(t, end, self.span)
                for rid in refs:
                    y = self._take(self._legs[rid].slot, end, self.span + self.max_lag)
                    self.stats.evaluations += 1
                    if self._is_echo(x, y):
                        frames = self.span // STEPS_PER_TICK
                        cols = np.arange(tick - frames + 1, tick + 1) % cfg.ring_frames
                        self._marks[t, cols] = True
                        self.stats.echo_spans += 1
                        self.stats.frames_marked += frames
                        break
        self._quiet = quiet

    def _take(self, slot: int, end: int, n: int) -> npt.NDArray[np.float32]:
        idx = (np.arange(end - n, end)) % self.ring
        out: npt.NDArray[np.float32] = self._env[slot, idx]
        return out

    def _is_echo(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.float32]) -> bool:
        """``x``: external [span, bands]; ``y``: reference [span + max_lag, bands], both
        ending now. Lag k compares x with y shifted k steps into the past."""
        cfg = self.config
        if float(x.max()) < ENERGY_FLOOR or float(y.max()) < ENERGY_FLOOR:
            return False
        span = x.shape[0]
        # lagged views of the reference: lag k -> y[max_lag - k : max_lag - k + span]
        view = np.lib.stride_tricks.sliding_window_view(y, span, axis=0)  # [L+1, bands, span]
        lagged = view[::-1]  # lag 0 first
        xc = (x - x.mean(axis=0)).T  # [bands, span]
        yc = lagged - lagged.mean(axis=2, keepdims=True)
        num = np.einsum("bs,kbs->kb", xc, yc)
        xx = np.einsum("bs,bs->b", xc, xc)
        yy = np.einsum("kbs,kbs->kb", yc, yc)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_band = np.where(xx[None, :] * yy > 0, num / np.sqrt(xx[None, :] * yy), 0.0)
        score = per_band.mean(axis=1)
        k = int(np.argmax(score))
        if score[k] < cfg.threshold:
            return False
        # the same pattern over time and bands at once (per-band correlation alone is
        # fooled by one burst in each signal)
        flat = float(num[k].sum() / np.sqrt(max(float(xx.sum() * yy[k].sum()), 1e-30)))
        if flat < cfg.threshold:
            return False
        ref = lagged[k].T  # [span, bands]
        if _activity(x) < cfg.min_activity or _activity(ref) < cfg.min_activity:
            return False
        gain = float(np.sqrt(np.sum(x**2) / max(float(np.sum(ref**2)), 1e-20)))
        return gain <= cfg.max_gain

    # ---- the windows (playout thread, from the frame bank) ----------------------------
    def settled(self, stream_id: int) -> int | None:
        """Bank tick before which this leg's echo marks are final (a later evaluation's
        span can still mark frames up to ``span_s`` back), or None when the leg is not
        gated against any reference (its windows need not wait)."""
        leg = self._legs.get(stream_id)
        if leg is None or leg.reference or not self._calls.refs.get(leg.call_id):
            return None
        if leg.call_id in self._quiet:
            return None  # its references carried nothing that could still be marked
        return self._evaluated - self.span // STEPS_PER_TICK + 1

    def marks(self, stream_id: int, first_tick: int, n_ticks: int) -> Bools | None:
        """Echo marks of ``n_ticks`` frames from bank tick ``first_tick`` (None: the leg
        is not gated, or the frames are older than the ring)."""
        leg = self._legs.get(stream_id)
        if leg is None or leg.reference or self.tick - first_tick >= self.config.ring_frames:
            return None
        cols = np.arange(first_tick, first_tick + n_ticks) % self.config.ring_frames
        out: Bools = self._marks[leg.slot, cols]
        return out


def _activity(env: npt.NDArray[np.float32]) -> float:
    """Share of 10 ms steps within 30 dB of the loudest step (a lone burst is not
    enough to call a span echo)."""
    total = env.sum(axis=1)
    peak = float(total.max())
    return float(np.mean(total >= peak * 10 ** (-30 / 20))) if peak > 0 else 0.0
