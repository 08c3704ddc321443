"""The bridge's seam to the detectors and the bus: one object that is the media
engine's frame sink, the call controller's publisher and its admission.

- Admission (signalling thread): a new call asks the detector runtime for a slot.
  Without one, plain SIP is refused (CapacityError: 503 + Retry-After) and SIPREC is
  answered but marked ``unanalyzed:capacity`` (DESIGN §8).
- Call events (signalling thread): forwarded to the bus; they also say which legs the
  runtime should analyse, with their roles (SIPREC metadata, vendor tracks, the API).
  ``ended`` gets the call's coverage record attached, and goes to the coverage
  tracker (``/metrics`` and the coverage objective, whose transitions are published
  as system events).
- Frames (playout thread, under the media engine's lock, so direct ``Ingest`` calls
  are safe here): every tick goes to the runtime in one call; legs are registered with
  its frame bank on this thread only (the bank is not thread-safe). The internal leg
  is never registered: its audio never reaches a detector or a ring (DESIGN §2); it
  only feeds the echo gate's short envelope ring as the echo reference of its call.
  Jitter-buffer stats are read round-robin (every leg about twice a second) into the
  bank, so every score carries late packets and jitter.

Locks: ``_lock`` guards the leg tables and the bank against the signalling thread;
the playout thread takes it inside the media lock, the signalling thread never holds
it while calling the media engine. ``WindowTally``'s lock is a leaf.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from detectors.alert_schema import (
    Alert,
    CallCoverage,
    CallEvent,
    CallMedia,
    LegCoverage,
    LegRole,
    ScoreUpdate,
    SystemEvent,
)
from detectors.bus.coverage_objective import CoverageTracker
from detectors.bus.numbers import NumberVault
from detectors.bus.policy import Scope
from detectors.caller_id.service import CallerIdDetector
from detectors.contract import WindowResult
from detectors.echo import EchoGate
from detectors.replay.stage import ReplayStage
from detectors.runtime import DetectorRuntime
from native.ingest import Ingest, PulledFrames
from sip_bridge.caller_id import caller_metadata
from sip_bridge.calls import Call
from sip_bridge.coverage import FrameTally, LegTally, WindowTally
from sip_bridge.dtmf_tap import DtmfTap
from sip_bridge.evidence import EvidenceRecorder
from sip_bridge.media import CapacityError

log = logging.getLogger(__name__)
STATS_EVERY_TICKS = 25  # each leg's jitter-buffer stats about every 0.5 s
JB_SUM_FIELDS = (
    "packets_received",
    "packets_discarded",
    "packets_late",
    "concealed_samples",
    "concealment_events",
    "packets_dtmf",  # RFC 4733 packets and events: counts only, never digits (DESIGN §2)
    "dtmf_events",
)


class BusPublisher(Protocol):
    """What the bridge needs of ``detectors.bus.publisher.AlertPublisher``."""

    def publish_alert(self, alert: Alert) -> None: ...

    def publish_score(self, score: ScoreUpdate) -> None: ...

    def publish_event(self, event: CallEvent) -> None: ...

    def publish_system(self, event: SystemEvent) -> None: ...


@dataclass(slots=True)
class _CallState:
    call_id: str
    started: float
    analysed: bool
    unanalyzed: str = ""
    external_ids: dict[str, str] = field(default_factory=dict)
    legs: dict[str, LegRole] = field(default_factory=dict)
    early: bool = False  # early media until the recorded call is answered


@dataclass(slots=True)
class _Registered:
    call_id: str
    stream_id: int
    role: LegRole


class Analysis:
    def __init__(
        self,
        runtime: DetectorRuntime,
        bus: BusPublisher,
        ingest: Ingest,
        windows: WindowTally | None = None,
        coverage: CoverageTracker | None = None,
        numbers: NumberVault | None = None,
        echo: EchoGate | None = None,
        replay: ReplayStage | None = None,
        evidence: EvidenceRecorder | None = None,
        caller_id: CallerIdDetector | None = None,
        dtmf: DtmfTap | None = None,
    ) -> None:
        """``windows`` must be the tally the runtime's ``on_result`` feeds. ``echo``:
        the gate fed every tick (external legs gated, internal legs its reference);
        ``replay``: the replay stage, told each call's keyed ANI hash; ``evidence``:
        the recorder keeping external-leg audio around alerts (tenants that opt in);
        ``caller_id``: the detector handed each call's caller-ID metadata; ``dtmf``:
        the tap taking analysed legs' DTMF (RFC 4733 and in-band) to dtmf_behaviour."""
        self.coverage = coverage
        self.numbers = numbers  # seals ANI/DNIS into call events (issue 11)
        self.echo = echo
        self.replay = replay
        self.evidence = evidence
        self.caller_id = caller_id
        self.dtmf = dtmf
        self.runtime = runtime
        self.bus = bus
        self.ingest = ingest
        self._lock = threading.Lock()
        self._calls: dict[str, _CallState] = {}
        self._wanted: dict[str, tuple[str, LegRole]] = {}  # leg id -> (call id, role)
        self._registered: dict[str, _Registered] = {}  # leg id -> bank registration
        self._tallies: dict[str, LegTally] = {}
        self._frames = FrameTally()
        self._windows = windows or WindowTally()
        self._admitted: set[str] = set()
        self._seen_legs: tuple[str, ...] = ()
        self._dirty = False
        self._tick = 0
        self._jb_live: dict[str, dict[str, int]] = {}
        self._jb_retired: dict[str, int] = dict.fromkeys(JB_SUM_FIELDS, 0)
        self.ticks = 0
        self.last_tick_ns = 0

    # ---- admission (CallAdmission) -----------------------------------------------

    def admit(self, call: Call) -> str:
        """ "" to analyse the call, or why not; raises CapacityError to refuse it."""
        # the alert policy's scope: the call's tenant (sip_bridge.tenant) and DNIS; a
        # queue comes later, claimed (detectors.scope_claims). The tenant also picks the
        # call's biometrics mode (the runtime's stage) and evidence mode (publish)
        scope = Scope(tenant=call.tenant, dnis=call.dnis or None)
        decision = self.runtime.open_call(call.call_id, call.correlation_id, scope=scope)
        if decision.analysed:
            self._windows.open(call.call_id)
            self._admitted.add(call.call_id)
            return ""
        if call.kind == "siprec":
            log.warning("call %s: no detector capacity, answered unanalysed", call.call_id)
            return "capacity"
        raise CapacityError(f"no detector capacity ({decision.reason})")

    def release(self, call: Call) -> None:
        """The call was admitted but never started (its legs did not open)."""
        self.runtime.end_call(call.call_id)
        self._windows.take(call.call_id)
        self._admitted.discard(call.call_id)

    # ---- call events (CallPublisher) ---------------------------------------------

    def publish(self, event: CallEvent, call: Call) -> None:
        if self.evidence is not None and event.event == "started":
            # before _update wants its legs: the playout thread's add_leg must find
            # the call under its tenant (whose evidence mode decides what is kept)
            self.evidence.call_started(call.call_id, event.at, call.tenant)
        if event.event == "ended":
            event = event.model_copy(update={"coverage": self._end(call)})
        else:
            self._update(call)
            if self.numbers is not None and (call.ani or call.dnis):
                sealed = self.numbers.seal(call.call_id, call.ani, call.dnis)
                event = event.model_copy(update={"numbers": sealed})
        if self.replay is not None and event.event != "ended":
            ani_hash = event.numbers.ani_hash if event.numbers is not None else ""
            self.replay.annotate(call.call_id, ani_hash, call.correlation_id)
        if self.caller_id is not None:
            if event.event == "ended":
                self.caller_id.end_call(call.call_id)
            else:
                ani_hash = event.numbers.ani_hash if event.numbers is not None else ""
                self.caller_id.update(call.call_id, caller_metadata(call, ani_hash))
        self.bus.publish_event(event)
        if self.coverage is not None:
            for system_event in self.coverage.observe(event):
                c = system_event.coverage
                if c is not None:
                    log.warning(
                        "%s: %s covered on %d of the last %d calls (objective %.2f)",
                        system_event.type,
                        c.dimension.value,
                        c.covered_calls,
                        c.calls,
                        c.objective,
                    )
                self.bus.publish_system(system_event)

    def _update(self, call: Call) -> None:
        with self._lock:
            st = self._calls.get(call.call_id)
            if st is None:
                analysed = not call.unanalyzed and call.call_id in self._admitted
                st = self._calls[call.call_id] = _CallState(
                    call.call_id, time.monotonic(), analysed, call.unanalyzed
                )
                if analysed and call.early_media:
                    st.early = True
                    self.runtime.mark_early_media(call.call_id)
            elif st.early and not call.early_media:
                st.early = False
                self.runtime.answered(call.call_id)
            st.external_ids = dict(call.external_ids)
            st.legs = {leg.leg_id: leg.role for leg in call.legs.values()}
            for leg_id in [k for k, v in self._wanted.items() if v[0] == call.call_id]:
                if leg_id not in st.legs:
                    del self._wanted[leg_id]
            for leg_id, role in st.legs.items():
                tally = self._tallies.get(leg_id)
                if tally is None:
                    self._tallies[leg_id] = LegTally(role)
                else:
                    tally.role = role
                if st.analysed:
                    self._wanted[leg_id] = (call.call_id, role)
            self._dirty = True

    def _end(self, call: Call) -> CallCoverage:
        if call.call_id not in self._calls:
            self._update(call)  # ended before any other event reached us
        with self._lock:
            st = self._calls[call.call_id]
            legs = set(st.legs) | {k for k, v in self._wanted.items() if v[0] == call.call_id}
            self._frames.fold_rows(legs, self._tallies)
            for leg_id in legs:
                self._wanted.pop(leg_id, None)
                reg = self._registered.pop(leg_id, None)
                if reg is not None:
                    self.runtime.bank.remove_leg(reg.stream_id)
                self._retire_jb(leg_id)
            tallies = {
                leg_id: self._tallies.pop(leg_id) for leg_id in legs if leg_id in self._tallies
            }
            if self.evidence is not None:
                self.evidence.call_ending(call.call_id)  # before the runtime forgets it
            if call.call_id in self._admitted:
                self._admitted.discard(call.call_id)
                self.runtime.end_call(call.call_id)  # final alert revisions, admission
            if self.evidence is not None:
                self.evidence.call_ended(call.call_id)
            del self._calls[call.call_id]
            self._dirty = True
        expected = tuple(sorted({p.spec.dimension for p in self.runtime.plans}))
        dims = self._windows.take(call.call_id, expected if st.analysed else ())
        per_leg = {leg_id: t.coverage() for leg_id, t in sorted(tallies.items())}
        return CallCoverage(
            duration_s=round(time.monotonic() - st.started, 3),
            media=_media(list(per_leg.values())),
            analysed=st.analysed,
            unanalyzed=st.unanalyzed,
            detectors={p.spec.name: p.spec.version for p in self.runtime.plans}
            if st.analysed
            else {},
            legs=per_leg,
            dimensions=dims,
        )

    # ---- detector results and alerts -------------------------------------------------

    def on_result(self, result: WindowResult) -> None:
        """The runtime's per-window hook (detector threads)."""
        self._windows.on_result(result)

    def external_ids(self, call_id: str) -> dict[str, str]:
        st = self._calls.get(call_id)
        return dict(st.external_ids) if st is not None else {}

    # ---- the tick (FrameSink) ----------------------------------------------------------

    def on_frames(self, now_ns: int, legs: Sequence[str], frames: PulledFrames) -> None:
        keyed: list[WindowResult] = []
        with self._lock:
            rows = tuple(legs)
            if legs is not self._seen_legs or self._dirty:
                if rows != self._frames.rows:
                    self._frames.relayout(rows, self._tallies)
                self._seen_legs = legs if isinstance(legs, tuple) else rows
                self._reconcile(frames)
                if self.dtmf is not None:  # the analysed legs: never an internal one
                    reg = self._registered
                    self.dtmf.sync(
                        {r.stream_id: (r.call_id, leg) for leg, r in reg.items()}, now_ns
                    )
            if self.dtmf is not None:
                try:
                    keyed = self.dtmf.push(now_ns, frames)
                except Exception:  # a DTMF fault must not cost the tick its audio
                    self.dtmf.stats.errors += 1
                    log.exception("dtmf tap failed; this tick's keys dropped")
            self._frames.count(frames.infos["flag"], now_ns)
            self._read_stats(frames)
            if self.echo is not None:  # before the bank's push: same tick number
                self.echo.push(frames.ids, frames.pcm, self.runtime.bank.tick)
            if self.evidence is not None:  # before the bank's push: the same leg clock
                self.evidence.push(frames)
            self.runtime.on_frames(frames)
            self._tick += 1
        for result in keyed:  # dtmf_behaviour: to fusion outside the leg-table lock
            self.runtime.signal(result)
        self.runtime.metrics.tick_lag.observe(max(0, time.monotonic_ns() - now_ns) / 1e9)
        self.ticks += 1
        self.last_tick_ns = now_ns

    def _reconcile(self, frames: PulledFrames) -> None:
        """Register legs with the bank as the signalling said, on this thread."""
        self._dirty = False
        bank = self.runtime.bank
        sids = {leg: int(frames.ids[row]) for row, leg in enumerate(self._frames.rows)}
        for leg_id, reg in list(self._registered.items()):
            want = self._wanted.get(leg_id)
            sid = sids.get(leg_id)
            if want is None or sid != reg.stream_id or want[1] is LegRole.INTERNAL:
                bank.remove_leg(reg.stream_id)
                del self._registered[leg_id]
                if self.evidence is not None:
                    self.evidence.remove_leg(reg.stream_id)
            elif want[1] is not reg.role:
                bank.set_role(reg.stream_id, want[1])
                reg.role = want[1]
                if self.evidence is not None and want[1] is not LegRole.EXTERNAL:
                    self.evidence.remove_leg(reg.stream_id)
        for leg_id, (call_id, role) in self._wanted.items():
            sid = sids.get(leg_id)
            if sid is None or leg_id in self._registered or role is LegRole.INTERNAL:
                continue
            try:
                self.runtime.add_leg(call_id, sid, leg_id, role)
            except (OverflowError, ValueError) as exc:
                log.warning("leg %s not analysed: %s", leg_id, exc)
                continue
            self._registered[leg_id] = _Registered(call_id, sid, role)
            if self.evidence is not None and role is LegRole.EXTERNAL:
                self.evidence.add_leg(call_id, leg_id, sid)  # never the internal leg
            tally = self._tallies.get(leg_id)
            if tally is not None:
                tally.analysed = True
        self._sync_echo(sids)

    def _sync_echo(self, sids: dict[str, int]) -> None:
        """The echo gate's legs: analysed external legs, and internal legs as their
        call's echo reference (DESIGN §2: used transiently, never analysed)."""
        if self.echo is None:
            return
        want: dict[int, tuple[str, bool]] = {}
        for leg_id, (call_id, role) in self._wanted.items():
            sid = sids.get(leg_id)
            if sid is None:
                continue
            if role is LegRole.INTERNAL:
                want[sid] = (call_id, True)
            elif role is LegRole.EXTERNAL and leg_id in self._registered:
                want[sid] = (call_id, False)
        have = self.echo.legs()
        for sid, what in have.items():
            if want.get(sid) != what:
                self.echo.remove(sid)
        for sid, (call_id, reference) in want.items():
            if have.get(sid) != (call_id, reference):
                add = self.echo.add_reference if reference else self.echo.add_target
                add(call_id, sid)

    def _read_stats(self, frames: PulledFrames) -> None:
        rows = self._frames.rows
        for row in range(self._tick % STATS_EVERY_TICKS, len(rows), STATS_EVERY_TICKS):
            leg_id, sid = rows[row], int(frames.ids[row])
            try:
                st = self.ingest.stream_stats(sid)
            except OSError:
                continue
            jitter_ms = float(st["jitter_rtp_units"]) / 8.0  # G.711: 8 kHz RTP clock
            self.runtime.bank.update_leg_stats(sid, int(st["packets_late"]), jitter_ms)
            tally = self._tallies.get(leg_id)
            if tally is not None:
                if not tally.first_packet_ns:
                    with contextlib.suppress(OSError):
                        counters = self.ingest.stream_counters(sid)
                        tally.first_packet_ns = int(counters["first_arrival_ns"])
                tally.packets_received = int(st["packets_received"])
                tally.packets_lost = int(st["packets_lost"])
                tally.packets_late = int(st["packets_late"])
            self._jb_live[leg_id] = {k: int(st[k]) for k in JB_SUM_FIELDS}

    def _retire_jb(self, leg_id: str) -> None:
        last = self._jb_live.pop(leg_id, None)
        if last is not None:
            for k, v in last.items():
                self._jb_retired[k] += v

    def jitter_sums(self) -> Mapping[str, int]:
        """Jitter-buffer counters summed over legs, ended legs included (for /metrics)."""
        with self._lock:
            out = dict(self._jb_retired)
            for snap in self._jb_live.values():
                for k, v in snap.items():
                    out[k] += v
        return out

    @property
    def live_calls(self) -> int:
        return len(self._calls)


def _media(legs: list[LegCoverage]) -> CallMedia:
    silent = sum(leg.silent for leg in legs)
    if not legs or silent == len(legs):
        return "none"
    return "one_way" if silent else "all"


class EnrichingPublisher:
    """Fusion's publisher: alerts get the call's external ids (a PBX acts on its own
    call) and are counted; everything goes on to the bus. ``analysis`` is set once
    built (the runtime it feeds needs this publisher first)."""

    def __init__(self, bus: BusPublisher) -> None:
        self.bus = bus
        self.analysis: Analysis | None = None

    def publish_alert(self, alert: Alert) -> None:
        if self.analysis is not None:
            ids = self.analysis.external_ids(alert.call_id)
            if ids and not alert.external_ids:
                alert = alert.model_copy(update={"external_ids": ids})
            metrics = self.analysis.runtime.metrics
            metrics.alerts.labels(alert.dimension.value, alert.band.value).inc()
            if self.analysis.evidence is not None:
                self.analysis.evidence.on_alert(alert)
        self.bus.publish_alert(alert)

    def publish_score(self, score: ScoreUpdate) -> None:
        self.bus.publish_score(score)
