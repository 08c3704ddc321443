"""A recorded call through the live pipeline, in virtual time.

The same parts as a live call on the bridge (``sip_bridge.wiring``): each leg is a
pushed stream of the native ingest (``Ingest.add_stream_push``, as the WebRTC and
WebSocket adapters use), its packets pushed at their recorded arrival times; every
20 ms of *virtual* time one batch pull (``Ingest.pull_all(now)``) goes to the detector
runtime (frame bank, window plans, scheduler, fusion) exactly as the bridge's playout
tick hands it over. The internal leg is played out (its media is reported) but never
registered with the runtime: its audio reaches no detector (DESIGN §2).

Virtual time makes the result independent of the speed: the runtime's clock is the
virtual clock, the scheduler's lanes have no real-time deadline and start a batch at
once, and each tick waits until every window submitted so far has been scored
(``Scheduler.wait_idle``) before the clock moves on. ``speed`` only paces the loop
against the wall clock (1 = real time; 0 = as fast as the CPU allows).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from detectors.alert_schema import Alert, CallEvent, LegRole, ScoreUpdate
from detectors.caller_id.service import CallerIdDetector
from detectors.contract import Detector
from detectors.runtime import DetectorRuntime, ResultStage, RuntimeConfig
from detectors.scheduler import LaneConfig
from native.ingest import Ingest, PulledFrames, frame_flag_name
from sip_bridge.analysis import STATS_EVERY_TICKS
from sip_bridge.caller_id import metadata_of
from sip_bridge.replay.sources import LegTrack, Recording

FRAME_NS = 20_000_000
TAIL_NS = 600_000_000  # played out after the last packet: the buffer's delay drains
BASE_NS = 1_000_000_000  # virtual time of the first packet (the C side's clock never at 0)
OFFLINE_LANE = LaneConfig(max_batch=8, max_wait_s=0.0, deadline_s=1e9, max_inflight=1)
STAT_FIELDS = (
    "packets_received",
    "packets_lost",
    "packets_late",
    "packets_duplicate",
    "packets_reordered",
    "concealed_samples",
    "concealment_events",
    "target_delay_ms",
)


class Forward(Protocol):
    """Where a replay may also publish (``--redis``): the bus publisher's methods."""

    def publish_alert(self, alert: Alert) -> None: ...

    def publish_score(self, score: ScoreUpdate) -> None: ...

    def publish_event(self, event: CallEvent) -> None: ...


class Capture:
    """Fusion's publisher during a replay: keeps every score update and alert revision
    (scheduler threads call it), and forwards them when publishing is on."""

    def __init__(self, forward: Forward | None = None) -> None:
        self.forward = forward
        self.scores: list[ScoreUpdate] = []
        self.alerts: list[Alert] = []
        self._lock = threading.Lock()

    def publish_alert(self, alert: Alert) -> None:
        with self._lock:
            self.alerts.append(alert)
        if self.forward is not None:
            self.forward.publish_alert(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        with self._lock:
            self.scores.append(update)
        if self.forward is not None:
            self.forward.publish_score(update)


@dataclass(slots=True)
class LegMedia:
    """What one leg's jitter buffer played, per second of the replay."""

    track: LegTrack
    stream_id: int
    analysed: bool
    played: list[int] = field(default_factory=list)  # samples per second (not NOT_STARTED)
    concealed: list[int] = field(default_factory=list)  # concealed samples per second
    flags: dict[str, int] = field(default_factory=dict)  # frames by flag
    stats: dict[str, int] = field(default_factory=dict)  # final jitter-buffer counters
    done: bool = False  # every packet pushed and played out: later frames not recorded

    def add(self, second: int, flag: str, samples: int, concealed: int) -> None:
        while len(self.played) <= second:
            self.played.append(0)
            self.concealed.append(0)
        self.flags[flag] = self.flags.get(flag, 0) + 1
        if flag != "not_started":
            self.played[second] += samples
            self.concealed[second] += min(concealed, samples)


@dataclass(slots=True)
class ReplayResult:
    call_id: str
    recording: Recording
    detectors: Sequence[Detector]
    legs: list[LegMedia]
    scores: list[ScoreUpdate]
    alerts: list[Alert]
    ticks: int
    wall_s: float
    speed: float


def default_call_id(recording: Recording) -> str:
    """Deterministic: the same recording gets the same call id (and alert ids)."""
    h = hashlib.sha256()
    for leg in recording.legs:
        h.update(leg.role.value.encode())
        for t, p in leg.packets:
            h.update(t.to_bytes(8, "big", signed=True))
            h.update(p)
    return "replay-" + h.hexdigest()[:16]


def build_runtime(
    detectors: Sequence[Detector],
    capture: Capture,
    clock: Callable[[], float],
    node_id: str,
    workers: int = 2,
    stage: ResultStage | None = None,
) -> DetectorRuntime:
    """The bridge's runtime (``Wiring``'s configuration) on the virtual clock, with
    offline lanes: no real-time deadline, a batch started as soon as a window is due."""
    longest = max((d.spec.window_s for d in detectors), default=1.0)
    return DetectorRuntime(
        detectors,
        capture,
        config=RuntimeConfig(
            workers=workers,
            max_legs=4,
            ring_s=2 * longest + 2.0,
            lanes={d.spec.name: OFFLINE_LANE for d in detectors},
            node_id=node_id,
        ),
        clock=clock,
        stage=stage,
    )


def replay(
    recording: Recording,
    detectors: Sequence[Detector],
    *,
    speed: float = 1.0,
    call_id: str | None = None,
    node_id: str = "replay",
    max_delay_ms: int = 300,
    forward: Forward | None = None,
    stage: ResultStage | None = None,
    stop: threading.Event | None = None,
) -> ReplayResult:
    """Play ``recording`` through ingest -> runtime -> fusion; see the module docstring."""
    call_id = call_id or default_call_id(recording)
    stop = stop or threading.Event()
    capture = Capture(forward)
    vnow = [0]
    runtime = build_runtime(detectors, capture, lambda: vnow[0] / 1e9, node_id, stage=stage)
    runtime.start()
    wall0 = time.monotonic()
    try:
        with Ingest(max_streams=max(1, len(recording.legs))) as ingest:
            legs = _open_legs(ingest, runtime, recording, call_id, max_delay_ms)
            # caller_id from the capture's INVITE (no velocity: one call, no cluster)
            meta = metadata_of(recording.identity, recording.ani, "")
            CallerIdDetector(runtime.signal, None).handle(call_id, meta)
            if forward is not None:
                forward.publish_event(_event(call_id, "started", legs))
            ticks = _play(ingest, runtime, legs, recording, vnow, speed, stop)
            for leg in legs:
                st = ingest.stream_stats(leg.stream_id)
                leg.stats = {k: int(st[k]) for k in STAT_FIELDS}
        if not runtime.scheduler.wait_idle():
            raise TimeoutError("detectors did not answer every window within 60 s")
        runtime.end_call(call_id)  # open alerts get their final revision
        if forward is not None:
            forward.publish_event(_event(call_id, "ended", legs, "replay_end"))
    finally:
        runtime.close()
    return ReplayResult(
        call_id,
        recording,
        detectors,
        legs,
        list(capture.scores),
        list(capture.alerts),
        ticks,
        time.monotonic() - wall0,
        speed,
    )


def _open_legs(
    ingest: Ingest,
    runtime: DetectorRuntime,
    recording: Recording,
    call_id: str,
    max_delay_ms: int,
) -> list[LegMedia]:
    decision = runtime.open_call(call_id)
    if not decision.analysed:
        raise RuntimeError(f"the detector runtime refused the call ({decision.reason})")
    legs = []
    for track in recording.legs:
        sid = ingest.add_stream_push(payload_types=track.payload_types, max_delay_ms=max_delay_ms)
        analysed = track.role is not LegRole.INTERNAL and bool(runtime.plans)
        if analysed:
            runtime.add_leg(call_id, sid, track.label, track.role)
        legs.append(LegMedia(track, sid, analysed))
    return legs


def _play(
    ingest: Ingest,
    runtime: DetectorRuntime,
    legs: list[LegMedia],
    recording: Recording,
    vnow: list[int],
    speed: float,
    stop: threading.Event,
) -> int:
    """The virtual playout clock: push what arrived, pull, hand the tick over, settle."""
    schedule = sorted(
        (t, i, k, p) for i, leg in enumerate(legs) for k, (t, p) in enumerate(leg.track.packets)
    )
    by_sid = {leg.stream_id: leg for leg in legs}
    left = [len(leg.track.packets) for leg in legs]  # packets not pushed yet, per leg
    end = recording.duration_ns + TAIL_NS
    wall0 = time.monotonic()
    nxt = tick = 0
    while tick * FRAME_NS <= end and not stop.is_set():
        now = tick * FRAME_NS
        while nxt < len(schedule) and schedule[nxt][0] <= now:
            t, i, _, datagram = schedule[nxt]
            ingest.push(legs[i].stream_id, datagram, BASE_NS + t)
            left[i] -= 1
            nxt += 1
        for i, leg in enumerate(legs):
            if not left[i] and not leg.done and _drained(ingest, leg.stream_id):
                leg.done = True  # its last packet was played out: the leg has ended
        if all(leg.done for leg in legs):
            break
        if speed > 0:
            ahead = wall0 + now / 1e9 / speed - time.monotonic()
            if ahead > 0:
                stop.wait(ahead)
        vnow[0] = now
        frames = ingest.pull_all(BASE_NS + now)
        _record(frames, by_sid, now)
        if tick % STATS_EVERY_TICKS == 0:
            for leg in legs:
                if leg.analysed:
                    st = ingest.stream_stats(leg.stream_id)
                    jitter_ms = float(st["jitter_rtp_units"]) / 8.0
                    runtime.bank.update_leg_stats(leg.stream_id, int(st["packets_late"]), jitter_ms)
        runtime.on_frames(frames)
        if not runtime.scheduler.wait_idle():
            raise TimeoutError("detectors did not answer every window within 60 s")
        tick += 1
    return tick


def _record(frames: PulledFrames, by_sid: dict[int, LegMedia], now_ns: int) -> None:
    second = now_ns // 1_000_000_000
    infos = frames.infos
    for row, sid in enumerate(np.asarray(frames.ids).tolist()):
        info = infos[row]
        leg = by_sid[sid]
        if leg.done:
            continue
        leg.add(
            second,
            frame_flag_name(int(info["flag"])),
            int(info["samples"]),
            int(info["concealed_samples"]),
        )


def _drained(ingest: Ingest, stream_id: int) -> bool:
    """Whether the leg's jitter buffer holds no audio that is still to be played."""
    s = ingest.stream_stats(stream_id)
    held = s["units_accepted"] - s["units_played"] - s["units_flushed"] - s["units_dropped"]
    return bool(held <= 0)


def _event(call_id: str, kind: str, legs: list[LegMedia], reason: str = "") -> CallEvent:
    return CallEvent(
        call_id=call_id,
        event=kind,  # type: ignore[arg-type]
        at=datetime.now(UTC),
        reason=reason,
        legs={leg.track.label: leg.track.role for leg in legs},
    )
