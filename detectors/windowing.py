"""Windowing: 20 ms frames of every leg in, detector windows out (DESIGN §3, §5).

One ``FrameBank`` per media process holds, for every registered leg (a row), a ring of
its audio at each model rate (resampled once, on arrival, with the streaming polyphase
resampler) and a ring of 2.5 ms unit codes from the jitter buffer's flags and
``real_mask`` (received, concealed, comfort noise, paused, not yet started, missing)
with a speech-energy bit. ``push`` takes one batch pull of all legs (``native.ingest.
PulledFrames``: ids, pcm, infos) and writes every leg in a few vectorised numpy ops.

A ``WindowPlan`` per detector tracks, per leg, where its next window ends; ``collect``
returns the windows that became complete. A window is a reference into the ring (row,
start, length), copied once, straight into the scheduler's batch tensor; windows that
need no inference (paused, leg role, concealed audio, too little speech) carry their
abstention already. Each received frame is also checked for tones and music
(``detectors.tone``): a voice dimension's window whose in-band active frames are
mostly stationary (ringback, dial tone, DTMF, hold music) abstains ``tone_or_music``.
Audio of PAUSED frames is zeroed before it reaches a ring. With an echo gate
(``detectors.echo``) attached as ``echo``, a voice dimension's window whose speech
units lie mostly in frames marked as the internal leg's echo abstains ``echo``; such
windows of a leg whose call has an echo reference are cut only once the gate's
marks over them are final (up to ``span_s`` + 200 ms later).

Utterance ends: with an ``UtteranceRule`` set as ``utterances``, the bank notes, per leg,
where its speech last stopped (the last frame with speech energy, once ``hangover_s`` of
no speech followed it, at least ``min_apart_s`` after the previous end; or, closer to the
previous end, once ``final_s`` of no speech followed it: a pause inside an utterance
noted as its end must not hide the utterance's real end, where the caller stops and
an alert is awaited, for up to a hop). A plan made with
``end_gap_s`` then also cuts a window *ending there* (marked ``urgent``: the scheduler
runs it without waiting to fill a batch), unless its last window ended less than
``end_gap_s`` before, and its fixed grid restarts from that end (next window one hop
later). So the last words of an utterance are scored within tens of milliseconds of the
caller falling silent, not up to a hop later, and the window count stays near one per
hop (DESIGN §5).

Leg time runs on the bank's tick from the moment the leg is added, so a leg missing
from a pull keeps its timeline (its units are marked missing, its audio zeroed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Abstention, LegRole
from detectors.contract import (
    VOICE_DIMENSIONS,
    DetectorSpec,
    FloatArray,
    WindowKey,
    WindowQuality,
)
from detectors.resample import PolyphaseResampler
from detectors.tone import SHARE_MIN, ToneTracker
from native.ingest_types import FRAME_INFO_DTYPE

IN_RATE = 8000
FRAME_MS = 20
UNITS_PER_FRAME = 8  # 2.5 ms units, as the jitter buffer's real_mask
SPEECH_BIT = 0x10
TONE_BIT = 0x20  # the frame is stationary (tone or music), see detectors.tone
BAND_BIT = 0x40  # the frame has in-band (100-3000 Hz) power above the speech gate
MIN_TONE_UNITS = 25 * UNITS_PER_FRAME  # 0.5 s of active frames before a window is judged

# Unit codes (low bits); SPEECH_BIT marks received audio above the speech-energy gate.
NOT_STARTED, REAL, CONCEALED, CNG, PAUSED, MISSING = range(6)


def _flag_constants() -> tuple[int, int, int, int, int]:
    from native import lib

    return (
        int(lib.CS_FRAME_NOT_STARTED),
        int(lib.CS_FRAME_NORMAL),
        int(lib.CS_FRAME_CONCEALED),
        int(lib.CS_FRAME_CNG),
        int(lib.CS_FRAME_PAUSED),
    )


@dataclass(frozen=True, slots=True)
class UtteranceRule:
    """When a leg's speech counts as ended (see the module docstring)."""

    hangover_s: float = 0.1  # no speech energy this long after the last voiced frame
    min_apart_s: float = 1.5  # at least this long after the previous utterance end
    # ... unless no speech came for this long: the caller stopped, and the end noted
    # before was a pause inside the utterance (None: min_apart_s always holds)
    final_s: float | None = 0.25

    def __post_init__(self) -> None:
        if self.final_s is not None and self.final_s < self.hangover_s:
            raise ValueError(f"final_s {self.final_s} is under hangover_s {self.hangover_s}")

    @property
    def hangover_frames(self) -> int:
        return max(1, round(self.hangover_s * 1000 / FRAME_MS))

    @property
    def final_frames(self) -> int | None:
        return None if self.final_s is None else max(1, round(self.final_s * 1000 / FRAME_MS))

    @property
    def apart_frames(self) -> int:
        return max(1, round(self.min_apart_s * 1000 / FRAME_MS))


@dataclass(frozen=True, slots=True)
class LegInfo:
    call_id: str
    leg_id: str
    role: LegRole
    codec: str = "pcmu"


@dataclass(slots=True)
class _Leg:
    info: LegInfo
    row: int
    first_tick: int
    late_total: int = 0
    jitter_ms: float = 0.0
    late_marks: dict[str, int] = field(default_factory=dict)


class RateRing:
    """Audio of every row at one rate: float32 [rows, frames * samples_per_frame]."""

    def __init__(self, rate: int, rows: int, ring_frames: int) -> None:
        self.rate = rate
        self.spf = rate * FRAME_MS // 1000
        self.length = ring_frames * self.spf
        self.audio = np.zeros((rows, self.length), np.float32)
        self.resampler = PolyphaseResampler(IN_RATE, rate, IN_RATE * FRAME_MS // 1000, rows)

    def read_into(self, row: int, start: int, out: FloatArray) -> None:
        """Copy ``len(out)`` samples of ``row`` from ring position ``start`` (wrapping)."""
        n = out.shape[0]
        start %= self.length
        first = min(n, self.length - start)
        out[:first] = self.audio[row, start : start + first]
        if first < n:
            out[first:] = self.audio[row, : n - first]


@dataclass(frozen=True, slots=True)
class WindowJob:
    """A complete window for one detector: a reference into a ring, or an abstention."""

    detector: str
    key: WindowKey
    quality: WindowQuality
    abstained: Abstention | None
    ready_at: float
    ring: RateRing | None = None
    row: int = -1
    start: int = 0
    length: int = 0
    tick: int = 0  # bank tick at which the window completed
    urgent: bool = False  # cut at an utterance end: run it without batching delay

    def read_into(self, out: FloatArray) -> None:
        if self.ring is None:
            raise ValueError("an abstained window has no audio")
        self.ring.read_into(self.row, self.start, out)


class EchoMarks(Protocol):
    def marks(self, stream_id: int, first_tick: int, n_ticks: int) -> npt.NDArray[np.bool_] | None:
        """Which of the frames are echo of the internal leg (None: not gated)."""
        ...

    def settled(self, stream_id: int) -> int | None:
        """The tick before which the leg's marks are final (None: not gated)."""
        ...


class SpeechMarks(Protocol):
    """The VAD gate (``detectors.vad.gate.VadGate``), by bank row and bank tick."""

    def reset(self, row: int, first_tick: int) -> None: ...

    def remove(self, row: int) -> None: ...

    def write(self, rows: npt.NDArray[np.intp], tick: int, x: npt.NDArray[np.float32]) -> None: ...

    def settled(self, row: int) -> int | None: ...

    def marks(self, row: int, first_tick: int, n_ticks: int) -> npt.NDArray[np.bool_] | None: ...


class FrameBank:
    """Rings of every leg's audio and unit codes; see the module docstring."""

    def __init__(
        self,
        rates: tuple[int, ...] | list[int],
        max_legs: int = 256,
        ring_s: float = 12.0,
        speech_gate_db: float = -45.0,
    ) -> None:
        self.max_legs = max_legs
        self.ring_frames = int(np.ceil(ring_s * 1000 / FRAME_MS))
        self.rings = {r: RateRing(r, max_legs, self.ring_frames) for r in sorted(set(rates))}
        self.units = np.zeros((max_legs, self.ring_frames * UNITS_PER_FRAME), np.uint8)
        self.tick = 0  # frames pushed so far (the bank's clock)
        self._gate = np.float32(32768.0**2 * 10 ** (speech_gate_db / 10))  # int16 power
        self._legs: dict[int, _Leg] = {}  # stream id -> leg
        self._free_rows = list(range(max_legs - 1, -1, -1))
        self._active = np.zeros(max_legs, bool)
        self._ids_cache: npt.NDArray[np.int32] | None = None
        self._rows_cache = np.zeros(0, np.intp)
        self._flags = _flag_constants()
        self._bits = (1 << np.arange(UNITS_PER_FRAME, dtype=np.uint8)).astype(np.uint8)
        self.echo: EchoMarks | None = None  # the echo gate (detectors.echo), if any
        self.echo_share_min = 0.5
        self.tones = ToneTracker(max_legs, float(self._gate))
        self.tone_share_min = SHARE_MIN  # of a window's active frames tonal -> abstain
        self.vad: SpeechMarks | None = None  # set before the first leg is added
        self.utterances: UtteranceRule | None = None  # set to find utterance ends
        self.last_voiced = np.full(max_legs, -1, np.int64)  # tick of the last voiced frame
        self.utterance_end = np.zeros(max_legs, np.int64)  # tick after the last utterance

    # ---- legs -----------------------------------------------------------------------

    def add_leg(self, stream_id: int, info: LegInfo) -> int:
        if stream_id in self._legs:
            raise ValueError(f"stream {stream_id} is already registered")
        if not self._free_rows:
            raise OverflowError(f"frame bank full ({self.max_legs} legs)")
        row = self._free_rows.pop()
        self._legs[stream_id] = _Leg(info, row, self.tick)
        self._active[row] = True
        self.units[row] = NOT_STARTED
        self.last_voiced[row] = -1
        self.utterance_end[row] = self.tick
        for ring in self.rings.values():
            ring.audio[row] = 0.0
            ring.resampler.reset([row])
        self.tones.reset([row])
        if self.vad is not None:
            self._vad_role(row, info.role)
        self._ids_cache = None
        return row

    def remove_leg(self, stream_id: int) -> None:
        leg = self._legs.pop(stream_id, None)
        if leg is not None:
            self._active[leg.row] = False
            self._free_rows.append(leg.row)
            if self.vad is not None:
                self.vad.remove(leg.row)
            self._ids_cache = None

    def set_role(self, stream_id: int, role: LegRole) -> None:
        leg = self._legs[stream_id]
        if self.vad is not None and (role is LegRole.INTERNAL) != (
            leg.info.role is LegRole.INTERNAL
        ):
            self._vad_role(leg.row, role)
        leg.info = LegInfo(leg.info.call_id, leg.info.leg_id, role, leg.info.codec)

    def _vad_role(self, row: int, role: LegRole) -> None:
        """The agent's leg is never analysed for voice: the VAD gate skips it."""
        assert self.vad is not None
        if role is LegRole.INTERNAL:
            self.vad.remove(row)
        else:
            self.vad.reset(row, self.tick)

    def update_leg_stats(self, stream_id: int, late_total: int, jitter_ms: float) -> None:
        """Cumulative late packets and current jitter (from the ingest's stream stats)."""
        leg = self._legs.get(stream_id)
        if leg is not None:
            leg.late_total, leg.jitter_ms = late_total, jitter_ms

    def legs(self) -> dict[int, LegInfo]:
        return {sid: leg.info for sid, leg in self._legs.items()}

    def leg_samples(self, stream_id: int, rate: int) -> int:
        """Samples of this leg pushed so far, at ``rate``."""
        return (self.tick - self._legs[stream_id].first_tick) * rate * FRAME_MS // 1000

    # ---- the per-tick write ---------------------------------------------------------

    def push(
        self,
        ids: npt.NDArray[np.int32],
        pcm: npt.NDArray[np.int16],
        infos: npt.NDArray[np.void],
    ) -> None:
        """Write one 20 ms frame of every leg in ``ids`` (unregistered ids are ignored;
        registered legs absent from ``ids`` are written as missing)."""
        if self._ids_cache is None or not np.array_equal(ids, self._ids_cache):
            self._ids_cache = ids.copy()
            self._rows_cache = np.array(
                [self._legs[int(i)].row if int(i) in self._legs else -1 for i in ids], np.intp
            )
        rows = self._rows_cache
        keep = rows >= 0
        col = self.tick % self.ring_frames
        ucol = col * UNITS_PER_FRAME
        self.units[self._active, ucol : ucol + UNITS_PER_FRAME] = MISSING
        for ring in self.rings.values():
            ring.audio[self._active, col * ring.spf : (col + 1) * ring.spf] = 0.0
        if keep.any():
            if not keep.all():
                rows, pcm, infos = rows[keep], pcm[keep], infos[keep]
            self._write(rows, pcm[:, : IN_RATE * FRAME_MS // 1000], infos, col)
        if self.vad is not None:  # legs missing from the pull: silence on the VAD's timeline
            missing = np.setdiff1d(np.flatnonzero(self._active), rows[rows >= 0])
            if missing.size:
                self.vad.write(missing, self.tick, np.zeros((missing.size, 160), np.float32))
        self.tick += 1
        if self.utterances is not None:
            self._utterance_ends(self.utterances)

    def _utterance_ends(self, rule: UtteranceRule) -> None:
        """Legs whose speech stopped ``hangover`` (or ``final``) ago: note where
        (vectorised)."""
        lv = self.last_voiced
        end = lv + 1
        silent = self.tick - end
        new = self._active & (lv >= 0) & (end > self.utterance_end)
        done = (
            new & (silent >= rule.hangover_frames) & (end - self.utterance_end >= rule.apart_frames)
        )
        final = rule.final_frames
        if final is not None:
            done |= new & (silent >= final)  # the caller stopped: min_apart_s does not hold
        if done.any():
            self.utterance_end[done] = end[done]

    def _write(
        self,
        rows: npt.NDArray[np.intp],
        pcm: npt.NDArray[np.int16],
        infos: npt.NDArray[np.void],
        col: int,
    ) -> None:
        f_not_started, _f_normal, _f_concealed, f_cng, f_paused = self._flags
        flag = infos["flag"]
        real = (infos["real_mask"][:, None] & self._bits[None, :]) != 0  # [n, 8]
        code = np.full(real.shape, CONCEALED, np.uint8)
        code[flag == f_cng] = CNG
        code[flag == f_not_started] = NOT_STARTED
        paused = flag == f_paused
        code[paused] = PAUSED
        code[real & ~paused[:, None]] = REAL
        x = pcm.astype(np.float32)
        if paused.any():
            x[paused] = 0.0  # DESIGN §2: paused audio never reaches a detector
        power = np.mean((x.reshape(len(rows), UNITS_PER_FRAME, -1)) ** 2, axis=2)
        received = code == REAL
        voiced_units = received & (power > self._gate)
        code[voiced_units] |= SPEECH_BIT
        voiced = np.count_nonzero(voiced_units, axis=1) >= UNITS_PER_FRAME // 2
        if voiced.any():
            self.last_voiced[rows[voiced]] = self.tick
        active, tonal = self.tones.update(rows, x)
        code[received & active[:, None]] |= BAND_BIT
        code[received & tonal[:, None]] |= TONE_BIT
        ucol = col * UNITS_PER_FRAME
        self.units[rows, ucol : ucol + UNITS_PER_FRAME] = code
        x *= np.float32(1.0 / 32768.0)
        if self.vad is not None:
            self.vad.write(rows, self.tick, x)
        for ring in self.rings.values():
            ring.audio[rows, col * ring.spf : (col + 1) * ring.spf] = ring.resampler.process(
                rows, x
            )

    # ---- windows --------------------------------------------------------------------

    def plan(self, spec: DetectorSpec, end_gap_s: float | None = None) -> WindowPlan:
        """``end_gap_s``: also cut windows at utterance ends (see the module docstring)."""
        if spec.sample_rate not in self.rings:
            raise ValueError(f"{spec.name}: the bank has no ring at {spec.sample_rate} Hz")
        ring = self.rings[spec.sample_rate]
        max_window_frames = -(-spec.window // ring.spf)
        if max_window_frames + 2 > self.ring_frames:
            raise ValueError(
                f"{spec.name}: window longer than the ring ({self.ring_frames} frames)"
            )
        return WindowPlan(self, spec, ring, end_gap_s)

    def fresh(self, job: WindowJob, margin_frames: int = 2) -> bool:
        """Whether the ring still holds the job's audio (not yet overwritten)."""
        if job.ring is None:
            return True
        age_frames = self.tick - job.tick
        window_frames = -(-job.length // job.ring.spf)
        return age_frames + window_frames + margin_frames < self.ring_frames

    def _quality(
        self, leg: _Leg, start_unit: int, n_units: int, mark: str
    ) -> tuple[WindowQuality, int, float]:
        """The window's quality, its count of paused units and its tonal share (of
        its in-band active units, 0 below ``MIN_TONE_UNITS`` of them)."""
        total = self.units.shape[1]
        start = start_unit % total
        seg = self.units[leg.row, start : start + n_units]
        if seg.shape[0] < n_units:
            seg = np.concatenate([seg, self.units[leg.row, : n_units - seg.shape[0]]])
        counts = np.bincount(seg & 0x0F, minlength=6)
        speech = (seg & SPEECH_BIT) != 0
        if self.vad is not None:  # energy AND Silero speech (module docstring)
            first_tick = start_unit // UNITS_PER_FRAME
            n_ticks = -(-(start_unit + n_units) // UNITS_PER_FRAME) - first_tick
            marks = self.vad.marks(leg.row, first_tick, n_ticks)
            if marks is not None:
                vad = np.repeat(marks, UNITS_PER_FRAME)
                speech &= vad[start_unit - first_tick * UNITS_PER_FRAME :][:n_units]
        speech_units = int(np.count_nonzero(speech))
        band_units = int(np.count_nonzero(seg & BAND_BIT))
        tone_share = (
            np.count_nonzero(seg & TONE_BIT) / band_units if band_units >= MIN_TONE_UNITS else 0.0
        )
        late = leg.late_total - leg.late_marks.get(mark, 0)
        leg.late_marks[mark] = leg.late_total
        return (
            WindowQuality(
                concealed_ratio=float(counts[CONCEALED] + counts[MISSING]) / n_units,
                cng_ratio=float(counts[CNG]) / n_units,
                missing_ratio=float(counts[MISSING]) / n_units,
                net_speech_s=speech_units * FRAME_MS / UNITS_PER_FRAME / 1000,
                late_packets=max(0, late),
                jitter_ms=leg.jitter_ms,
            ),
            int(counts[PAUSED]),
            float(tone_share),
        )

    def echo_share(self, sid: int, start_unit: int, n_units: int) -> float:
        """Share of the window's speech units in frames the echo gate marked."""
        if self.echo is None:
            return 0.0
        first_tick = start_unit // UNITS_PER_FRAME
        n_ticks = -(-(start_unit + n_units) // UNITS_PER_FRAME) - first_tick
        marks = self.echo.marks(sid, first_tick, n_ticks)
        if marks is None or not marks.any():
            return 0.0
        total = self.units.shape[1]
        idx = (np.arange(start_unit, start_unit + n_units)) % total
        leg_row = self._legs[sid].row
        speech = (self.units[leg_row, idx] & SPEECH_BIT) != 0
        if not speech.any():
            return 0.0
        echo = np.repeat(marks, UNITS_PER_FRAME)[start_unit - first_tick * UNITS_PER_FRAME :][
            :n_units
        ]
        return float(np.count_nonzero(speech & echo)) / float(np.count_nonzero(speech))


class WindowPlan:
    """Where each leg's next window (for one detector) ends; see FrameBank.plan."""

    def __init__(
        self, bank: FrameBank, spec: DetectorSpec, ring: RateRing, end_gap_s: float | None = None
    ) -> None:
        self.bank, self.spec, self.ring = bank, spec, ring
        self._next_end: dict[int, int] = {}  # stream id -> leg-relative end sample
        self._last_end: dict[int, int] = {}  # stream id -> end of the last window cut
        self._end_gap = None if end_gap_s is None else int(end_gap_s * spec.sample_rate)
        self._unit_samples = spec.sample_rate * FRAME_MS // 1000 // UNITS_PER_FRAME
        self._voice = spec.dimension in VOICE_DIMENSIONS
        self._gated = spec.min_net_speech_s > 0.0

    def collect(self, now: float) -> list[WindowJob]:
        """Windows completed by the frames pushed so far (each leg, oldest first)."""
        spec, bank, ring = self.spec, self.bank, self.ring
        jobs: list[WindowJob] = []
        for sid, leg in bank._legs.items():
            role = leg.info.role
            if role not in spec.roles and role is LegRole.INTERNAL:
                continue  # the agent's leg is never analysed for voice (DESIGN §2)
            written = (bank.tick - leg.first_tick) * ring.spf
            ready = written
            if self._voice and bank.echo is not None:
                settled = bank.echo.settled(sid)  # wait for final echo marks
                if settled is not None:
                    ready = min(written, max(0, settled - leg.first_tick) * ring.spf)
            if self._gated and bank.vad is not None:  # wait for final VAD marks
                vad_settled = bank.vad.settled(leg.row)
                if vad_settled is not None:
                    ready = min(ready, max(0, vad_settled - leg.first_tick) * ring.spf)
            end = self._next_end.get(sid, spec.window)
            last = self._last_end.get(sid, 0)
            while end <= ready:
                jobs.append(self._job(sid, leg, end, written, now))
                last, end = end, end + spec.hop
            if self._end_gap is not None and bank.utterances is not None:
                # the leg's last utterance end, if not yet covered: a window ending there
                cut = int(bank.utterance_end[leg.row] - leg.first_tick) * ring.spf
                if spec.window <= cut <= ready and cut - last >= max(1, self._end_gap):
                    jobs.append(self._job(sid, leg, cut, written, now, urgent=True))
                    last, end = cut, cut + spec.hop  # the grid restarts from the end
            self._next_end[sid], self._last_end[sid] = end, last
        for sid in [s for s in self._next_end if s not in bank._legs]:
            del self._next_end[sid]
            self._last_end.pop(sid, None)
        return jobs

    def _job(
        self, sid: int, leg: _Leg, end: int, written: int, now: float, urgent: bool = False
    ) -> WindowJob:
        spec, bank, ring = self.spec, self.bank, self.ring
        start = end - spec.window
        us = self._unit_samples
        first_unit = leg.first_tick * UNITS_PER_FRAME + start // us
        n_units = -(-end // us) - start // us
        quality, paused_units, tone_share = bank._quality(leg, first_unit, n_units, spec.name)
        key = WindowKey(
            leg.info.call_id,
            leg.info.leg_id,
            leg.info.role,
            start / spec.sample_rate,
            end / spec.sample_rate,
        )
        abstained: Abstention | None = None
        if leg.info.role not in spec.roles:
            abstained = Abstention.LEG_UNKNOWN
        elif paused_units:
            abstained = Abstention.PAUSED
        elif quality.concealed_ratio > spec.max_concealed_ratio:
            abstained = Abstention.TOO_MUCH_CONCEALED
        elif (
            spec.dimension in VOICE_DIMENSIONS
            and bank.echo is not None
            and bank.echo_share(sid, first_unit, n_units) >= bank.echo_share_min
        ):
            abstained = Abstention.ECHO  # its speech is mostly the internal leg's echo
        elif self._voice and tone_share >= bank.tone_share_min:
            abstained = Abstention.TONE_OR_MUSIC  # ringback, DTMF, hold music: not a voice
        elif quality.net_speech_s < spec.min_net_speech_s:
            abstained = Abstention.TOO_LITTLE_SPEECH
        if abstained is not None:
            return WindowJob(spec.name, key, quality, abstained, now, tick=bank.tick)
        ring_start = leg.first_tick * ring.spf + start
        tick_of_end = bank.tick - (written - end) // ring.spf
        return WindowJob(
            spec.name,
            key,
            quality,
            None,
            now,
            ring,
            leg.row,
            ring_start,
            spec.window,
            tick_of_end,
            urgent,
        )


def frames_from_pcm(pcm: npt.NDArray[np.int16], flag: int | None = None) -> npt.NDArray[np.void]:
    """Frame infos for ``pcm`` [n, 160], all received NORMAL unless ``flag`` (tests, tools)."""
    infos = np.zeros(pcm.shape[0], FRAME_INFO_DTYPE)
    infos["flag"] = _flag_constants()[1] if flag is None else flag
    infos["real_mask"] = 0xFF
    infos["samples"] = pcm.shape[1]
    return infos
