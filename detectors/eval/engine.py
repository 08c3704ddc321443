"""Run detectors over labelled calls through the live pipeline, in virtual time.

Conditions (``CONDITIONS``):

- ``clean``: no telephone channel. The file is resampled straight to each model's rate
  (``detectors.resample``) and cut into the model's windows (window/hop as the frame bank
  would: windows end at ``window, window + hop, …`` samples); the frame bank's speech
  gate (-45 dBFS per 2.5 ms) gives each window's net speech, and windows below the
  model's minimum abstain ``too_little_speech`` as they would live. This shows the model
  at its best; it is not a telephone condition.
- ``g711``: resampled to 8 kHz, µ-law encoded, packetised as 20 ms RTP (``native.sim``),
  delivered 20 ms after sending into the native jitter buffer, pulled every 20 ms of
  virtual time; the decoded frames go through the runtime's ``FrameBank`` (polyphase
  resampling to the model rate, unit codes, speech gate) and ``WindowPlan`` exactly as the
  media process feeds them (with the runtime's default utterance-end windows too).
- ``g711_loss5``: as ``g711`` with 5 % of packets dropped (Bernoulli, seeded per call:
  reproducible), concealed by the jitter buffer; windows with more than the model's
  ``max_concealed_ratio`` of concealed audio abstain, as they would live.

In every condition windows are scored by the runtime's ``Scheduler`` (batched, the
detector's own score transform) into ``WindowResult`` s, and each detector's results also
feed its own ``Fusion`` with the policy, which decides whether the call would have alerted
(N-of-M windows at the policy threshold). The scheduler's real-time deadline does not
apply offline (it is set very long), and frames are pushed in chunks shorter than the
ring so no window goes stale: every complete window is scored or abstains for a reason.

Per call the window scores are aggregated to one score (``mean`` by default, or ``max``
or ``median``) over scored windows; a call with no scored window abstains (reason: its
windows' most common abstention, or ``shorter_than_window``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Abstention, Alert, LegRole, ScoreUpdate
from detectors.contract import Detector, WindowKey, WindowQuality, WindowResult
from detectors.eval.audio import FloatArray, read_audio, resample, to_int16
from detectors.eval.dataset import Item
from detectors.fusion import Fusion, Policy
from detectors.runtime import RuntimeConfig
from detectors.scheduler import LaneConfig, Scheduler
from detectors.windowing import (
    FRAME_MS,
    IN_RATE,
    UNITS_PER_FRAME,
    FrameBank,
    LegInfo,
    RateRing,
    WindowJob,
)
from native.ingest_types import FRAME_INFO_DTYPE
from native.jitter import JitterBuffer, JitterConfig
from native.sim import FRAME_NS, g711_stream, simulate

CONDITIONS: dict[str, str] = {
    "clean": "no telephone channel: the file resampled straight to the model rate",
    "g711": "µ-law 8 kHz RTP (20 ms) through the native jitter buffer, no loss",
    "g711_loss5": "as g711 with 5 % seeded Bernoulli packet loss, concealed by the buffer",
}
LOSS = {"clean": 0.0, "g711": 0.0, "g711_loss5": 0.05}
NETWORK_DELAY_NS = 20_000_000
GAP_S = 0.3  # silence between a speaker's files when they form one call
SPEECH_GATE_DB = -45.0  # the frame bank's default
OFFLINE_LANE = LaneConfig(max_batch=8, max_wait_s=0.01, deadline_s=1e9, max_inflight=1)
AGGREGATES: dict[str, Callable[[npt.NDArray[np.float64]], float]] = {
    "mean": lambda a: float(np.mean(a)),
    "max": lambda a: float(np.max(a)),
    "median": lambda a: float(np.median(a)),
}


@dataclass(slots=True)
class CallOutcome:
    """One detector's verdict on one call in one condition."""

    scores: list[tuple[float, float]] = field(default_factory=list)  # (start_s, score)
    speech: list[float] = field(default_factory=list)  # net speech s, beside ``scores``
    abstained: Counter[str] = field(default_factory=Counter)
    alerted: bool = False

    def score(self, aggregate: str) -> float | None:
        if not self.scores:
            return None
        return AGGREGATES[aggregate](np.array([s for _, s in self.scores]))

    def abstention(self) -> str:
        if self.abstained:
            return self.abstained.most_common(1)[0][0]
        return "shorter_than_window"


Outcomes = dict[str, dict[str, CallOutcome]]  # detector -> call id -> outcome
AudioLoader = Callable[[Item], tuple[FloatArray, int]]


class _Capture:
    """An AlertPublisher that notes which calls alerted."""

    def __init__(self) -> None:
        self.alerted: set[str] = set()

    def publish_alert(self, alert: Alert) -> None:
        self.alerted.add(alert.call_id)

    def publish_score(self, update: ScoreUpdate) -> None:
        return None


class _Collector:
    """The scheduler's sink: results per detector and call, fusion per detector, and a
    count so a chunk can be drained before the next one is pushed."""

    def __init__(self, detectors: Sequence[Detector], policy: Policy) -> None:
        self.out: Outcomes = {d.spec.name: {} for d in detectors}
        self.captures = {d.spec.name: _Capture() for d in detectors}
        self.fusions = {
            d.spec.name: Fusion(self.captures[d.spec.name], policy, "eval") for d in detectors
        }
        self._cond = threading.Condition()
        self.expected = 0
        self.received = 0

    def open(self, call_id: str) -> None:
        for name, fusion in self.fusions.items():
            fusion.open_call(call_id)
            self.out[name].setdefault(call_id, CallOutcome())

    def close(self, call_id: str) -> None:
        for name, fusion in self.fusions.items():
            fusion.end_call(call_id)
            self.out[name][call_id].alerted = call_id in self.captures[name].alerted

    def expect(self, n: int) -> None:
        with self._cond:
            self.expected += n

    def sink(self, r: WindowResult) -> None:
        with self._cond:
            o = self.out[r.detector][r.key.call_id]
            if r.score is not None:
                o.scores.append((r.key.start_s, r.score))
                o.speech.append(r.quality.net_speech_s)
            else:
                o.abstained[r.abstained.value if r.abstained else "unknown"] += 1
            self.fusions[r.detector].on_result(r)
            self.received += 1
            self._cond.notify_all()

    def drain(self, timeout_s: float = 3600.0) -> None:
        end = time.monotonic() + timeout_s
        with self._cond:
            while self.received < self.expected:
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("detectors did not answer every window")
                self._cond.wait(min(left, 1.0))


def load_call_audio(item: Item) -> tuple[FloatArray, int]:
    """The call's audio (a speaker's files joined with short gaps) at one rate: the
    highest rate among its files, so nothing is thrown away before the channel."""
    parts = [read_audio(f) for f in item.files]
    rate = max(r for _, r in parts)
    gap = np.zeros(int(GAP_S * rate), np.float32)
    chunks: list[FloatArray] = []
    for i, (x, r) in enumerate(parts):
        if i:
            chunks.append(gap)
        chunks.append(resample(x, r, rate))
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32), rate


def telephone_frames(
    x: FloatArray, rate: int, loss: float, seed: int
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.void]]:
    """The call as the jitter buffer plays it out: int16 [n, 160] and frame infos."""
    pcm8 = to_int16(resample(x, rate, IN_RATE))
    packets = g711_stream(pcm8)
    rng = np.random.default_rng(seed)
    lost = rng.random(len(packets)) < loss
    arrivals = [
        (p.send_ns + NETWORK_DELAY_NS, p.index, p.datagram)
        for p, gone in zip(packets, lost, strict=True)
        if not gone
    ]
    jb = JitterBuffer(JitterConfig(dtmf_key=seed))
    last = packets[-1].send_ns if packets else 0
    sim = simulate(
        jb, arrivals, until_ns=last + 2_000_000_000 + 10 * FRAME_NS, stop_when_drained=True
    )
    n = len(sim.frames)
    pcm = np.zeros((n, IN_RATE * FRAME_MS // 1000), np.int16)
    infos = np.zeros(n, FRAME_INFO_DTYPE)
    for i, fr in enumerate(sim.frames):
        pcm[i] = fr.pcm
        infos[i]["flag"] = int(fr.flag)
        infos[i]["real_mask"] = fr.real_mask
        infos[i]["samples"] = fr.pcm.shape[0]
        infos[i]["concealed_samples"] = fr.concealed_samples
    return pcm, infos


def _call_seed(call_id: str, seed: int) -> int:
    import hashlib

    h = hashlib.sha256(f"{seed}:{call_id}".encode()).digest()
    return int.from_bytes(h[:4], "big")


def run_condition(
    condition: str,
    detectors: Sequence[Detector],
    items: Sequence[Item],
    *,
    policy: Policy | None = None,
    seed: int = 0,
    legs: int = 16,
    chunk_s: float = 5.0,
    progress: Callable[[str], None] | None = None,
    audio: AudioLoader | None = None,
) -> Outcomes:
    """Every item through ``condition`` and every detector; outcomes per call.
    ``audio`` gives an item's audio (default: its files back to back,
    ``load_call_audio``); the session evaluation renders sessions and channels there."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r} (one of {', '.join(CONDITIONS)})")
    collector = _Collector(detectors, policy or Policy())
    for first in range(0, len(items), legs):
        wave = items[first : first + legs]
        if condition == "clean":
            _clean_wave(wave, detectors, collector, audio or load_call_audio)
        else:
            _telephone_wave(
                wave, detectors, collector, LOSS[condition], seed, chunk_s, audio or load_call_audio
            )
        if progress:
            progress(f"{condition}: {min(first + legs, len(items))}/{len(items)} calls")
    return collector.out


def _telephone_wave(
    wave: Sequence[Item],
    detectors: Sequence[Detector],
    collector: _Collector,
    loss: float,
    seed: int,
    chunk_s: float,
    audio: AudioLoader,
) -> None:
    streams = []
    for it in wave:
        x, rate = audio(it)
        streams.append(telephone_frames(x, rate, loss, _call_seed(it.call_id, seed)))
    bank = FrameBank([d.spec.sample_rate for d in detectors], max_legs=len(wave))
    scheduler = _scheduler(detectors, collector, bank)
    live = RuntimeConfig()  # windows as the media process cuts them, utterance ends too
    bank.utterances = live.utterances
    gaps = dict(live.utterance_ends) if live.utterances is not None else {}
    plans = [bank.plan(d.spec, gaps.get(d.spec.dimension)) for d in detectors]
    longest_window = max(
        -(-d.spec.window * 1000 // (d.spec.sample_rate * FRAME_MS)) for d in detectors
    )
    chunk = max(1, min(int(chunk_s * 1000 / FRAME_MS), bank.ring_frames - longest_window - 8))
    for sid, it in enumerate(wave):
        collector.open(it.call_id)
        bank.add_leg(sid, LegInfo(it.call_id, "caller", LegRole.EXTERNAL, "pcmu"))
    active = set(range(len(wave)))
    t = 0
    while active:
        ids = np.array(sorted(active), np.int32)
        pcm = np.stack([streams[i][0][t] for i in ids])
        infos = np.stack([streams[i][1][t] for i in ids])
        bank.push(ids, pcm, infos)
        now = time.monotonic()
        for plan in plans:
            jobs = plan.collect(now)
            if jobs:
                collector.expect(len(jobs))
                scheduler.submit(jobs)
        t += 1
        ended = [i for i in active if t >= len(streams[i][0])]
        for i in ended:
            active.discard(i)
            bank.remove_leg(i)
        if t % chunk == 0 or not active:
            collector.drain()
    scheduler.close()
    for it in wave:
        collector.close(it.call_id)


def _clean_wave(
    wave: Sequence[Item],
    detectors: Sequence[Detector],
    collector: _Collector,
    load: AudioLoader,
) -> None:
    scheduler = _scheduler(detectors, collector, None)
    audio = [load(it) for it in wave]
    rates = sorted({d.spec.sample_rate for d in detectors})
    at_rate = {r: [resample(x, sr, r) for x, sr in audio] for r in rates}
    rings: dict[int, RateRing] = {}
    for r in rates:
        longest = max((len(x) for x in at_rate[r]), default=0)
        spf = r * FRAME_MS // 1000
        ring = RateRing(r, len(wave), -(-longest // spf) + 2)
        for row, x in enumerate(at_rate[r]):
            ring.audio[row, : len(x)] = x
        rings[r] = ring
    gate = 10 ** (SPEECH_GATE_DB / 10)
    now = time.monotonic()
    for row, it in enumerate(wave):
        collector.open(it.call_id)
        for d in detectors:
            spec = d.spec
            x = at_rate[spec.sample_rate][row]
            unit = spec.sample_rate * FRAME_MS // 1000 // UNITS_PER_FRAME
            jobs: list[WindowJob] = []
            for end in range(spec.window, len(x) + 1, spec.hop):
                start = end - spec.window
                seg = x[start:end]
                n_units = len(seg) // unit
                power = np.mean(seg[: n_units * unit].reshape(n_units, unit) ** 2, axis=1)
                net = float(np.count_nonzero(power > gate)) * FRAME_MS / UNITS_PER_FRAME / 1000
                key = WindowKey(
                    it.call_id,
                    "caller",
                    LegRole.EXTERNAL,
                    start / spec.sample_rate,
                    end / spec.sample_rate,
                )
                quality = WindowQuality(net_speech_s=net)
                abst = Abstention.TOO_LITTLE_SPEECH if net < spec.min_net_speech_s else None
                jobs.append(
                    WindowJob(
                        spec.name,
                        key,
                        quality,
                        abst,
                        now,
                        None if abst else rings[spec.sample_rate],
                        row,
                        start,
                        spec.window,
                    )
                )
            if jobs:
                collector.expect(len(jobs))
                scheduler.submit(jobs)
    collector.drain()
    scheduler.close()
    for it in wave:
        collector.close(it.call_id)


def _scheduler(
    detectors: Sequence[Detector], collector: _Collector, bank: FrameBank | None
) -> Scheduler:
    """The runtime's scheduler, with no real-time deadline (offline)."""
    s = Scheduler(detectors, collector.sink, bank=bank, workers=2, config=OFFLINE_LANE)
    s.start()
    return s
