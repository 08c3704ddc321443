"""Calls and legs of the media process: ids, metadata, lifecycle events.

:class:`CallController` is what signalling (the SIP UAS, later the control API) talks
to. It is synchronous: it opens and changes legs on a :class:`MediaBackend` (the
native ingest in production, a fake in unit tests), keeps each call's metadata (ANI,
DNIS, SIPREC participants, codec per leg, the caller identity inputs) and hands
:class:`CallEvent` s (started, updated, held, resumed, ended with a reason; the
number-free identity summary on all but ``ended``) to a :class:`CallPublisher`
(:class:`MemoryPublisher` keeps them in a list).

Early media (issue 10): a call is early (scored, never alerting) while SIPREC metadata
or the PBX's own word (``sip_bridge.call_state``: a SIP header, the control API) says it
is not answered yet; one state, whoever said it last, and once answered it stays so
(whoever says early later, SIPREC metadata included, is refused: ``after_answer``).
A statement that repeats the last one (a session refresh re-sending the same headers
or metadata) is not counted again, call state and leg roles alike
(``sip_bridge.stated_counts.restated``).

Plain SIP forks (issue 10): a leg's role is what the PBX said for its m-line
(``sip_bridge.leg_roles``: a SIP header, an ``a=label`` role word), kept per m-line index
across re-INVITEs until restated or the line is removed; else ``mixed``.

SIPREC metadata updates merge into the call's metadata (partial updates change what
they name); a leg whose sending participant changes (a transfer, re-anchoring) keeps
its id and is analysed under its new role, its RTP source lock re-armed with probation
(``MediaBackend.update_leg``) so the new party's stream is learned and an injected one
is not.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from detectors.alert_schema import CallEvent, LegRole
from native.ingest import PayloadType
from native.srtp import SrtpKey
from sip_bridge.call_state import CallStates, State, StateHint, Verdict, judge
from sip_bridge.call_state import Origin as StateOrigin
from sip_bridge.call_state import taken as state_taken
from sip_bridge.leg_roles import (
    Decision,
    LegRoleStats,
    Origin,
    Reason,
    RoleStatement,
    decide,
    read_api,
    taken,
)
from sip_bridge.media import CapacityError, PushedLeg
from sip_bridge.sip.identity import CallerIdentity
from sip_bridge.sip.offer_answer import NegotiatedStream
from sip_bridge.sip.siprec import RecordingMetadata, StreamRole
from sip_bridge.stated_counts import restated
from sip_bridge.tenant import Hint, TenantResolver

log = logging.getLogger(__name__)
EventName = Literal["started", "updated", "held", "resumed", "ended"]


class MediaBackend(Protocol):
    def open_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        srtp: SrtpKey | None = None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> int: ...

    def set_srtp(self, leg_id: str, srtp: SrtpKey | None) -> bool:
        """SDES re-key (True when the key changed); None: plain RTP."""
        ...

    def update_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> None: ...

    def set_paused(self, leg_id: str, paused: bool) -> None: ...

    def close_leg(self, leg_id: str) -> None: ...

    def drain_legs(self, leg_ids: Sequence[str], then: Callable[[], None]) -> bool:
        """Close the legs after their buffered audio has played out. True: closed now,
        ``then`` not called; False: ``then`` is called, from another thread, once closed."""
        ...

    def idle_ns(self, leg_id: str, now_ns: int) -> int: ...

    def open_pushed_leg(
        self, leg_id: str, payload_types: Sequence[PayloadType], out_rate: int = 8000
    ) -> PushedLeg: ...


@dataclass(slots=True)
class Leg:
    leg_id: str
    index: int  # m= line of the SDP (or the API's order)
    label: str | None
    role: LegRole
    role_source: str  # siprec_metadata, vendor_track, api, sip_header, sdp_label, m_line_guess
    codec: str
    local_port: int
    remote: tuple[str, int] | None
    paused: bool = False
    participant: str = ""  # the sending participant's id (SIPREC metadata)
    payload_types: tuple[PayloadType, ...] = ()  # what its media backend decodes
    ssrc: int = 0  # the offer's a=ssrc (0: none)


@dataclass(slots=True)
class Call:
    call_id: str
    kind: str  # sip, siprec, api
    sip_call_id: str = ""
    ani: str = ""
    dnis: str = ""
    correlation_id: str | None = None
    external_ids: dict[str, str] = field(default_factory=dict)
    participants: list[tuple[str, str]] = field(default_factory=list)  # (aor, name)
    legs: dict[str, Leg] = field(default_factory=dict)
    unanalyzed: str = ""  # e.g. "capacity": answered, media not analysed
    state: str = "live"
    end_reason: str = ""
    identity: CallerIdentity | None = None  # numbers inside: bridge memory only
    metadata: RecordingMetadata | None = None  # SIPREC, every update merged in
    caller_participant: str = ""  # SIPREC participant id of the external party
    early_media: bool = False  # not answered yet (SIPREC metadata, sip_bridge.call_state)
    tenant: str = "default"  # decided when the call starts (sip_bridge.tenant)
    tenant_source: str = "default"  # which step decided it
    stated_roles: dict[int, tuple[LegRole, Origin]] = field(default_factory=dict)  # plain SIP
    state_said: tuple[State, StateOrigin] | None = None  # taken last, and by whom
    statements: dict[str, object] = field(default_factory=dict)  # last per topic (restated)


class CallPublisher(Protocol):
    def publish(self, event: CallEvent, call: Call) -> None: ...


class MemoryPublisher:
    """Keeps every (event, call snapshot) in order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[CallEvent, Call]] = []

    def publish(self, event: CallEvent, call: Call) -> None:
        with self._lock:
            self.events.append((event, call))

    def of(self, call_id: str) -> list[CallEvent]:
        with self._lock:
            return [e for e, _ in self.events if e.call_id == call_id]


class CallAdmission(Protocol):
    """Whether a new call gets analysed (the detector runtime's capacity, DESIGN §8)."""

    def admit(self, call: Call) -> str:
        """ "" to analyse, else the ``unanalyzed`` reason; CapacityError refuses it."""
        ...

    def release(self, call: Call) -> None:
        """The admitted call did not start after all."""
        ...


@dataclass(frozen=True, slots=True)
class CallSetup:
    kind: str
    sip_call_id: str = ""
    ani: str = ""
    dnis: str = ""
    correlation_id: str | None = None
    external_ids: dict[str, str] = field(default_factory=dict)
    leg_roles: dict[int, LegRole] = field(default_factory=dict)  # the control API's, by index
    identity: CallerIdentity | None = None
    tenant_hints: tuple[Hint, ...] = ()  # explicit tenant values, in priority order
    source: str = ""  # the signalling peer's address (tenant mapping by trunk)
    call_state: StateHint | None = None  # the PBX's word: early media until answered
    leg_roles_said: RoleStatement | None = None  # plain SIP: the PBX's word on its m-lines


@dataclass(frozen=True, slots=True)
class PushedLegSpec:
    """One leg of an adapter's call (WebRTC, media WebSocket, AudioSocket): its label in
    the transport (a track or channel name), role and where the role came from, the
    codec it carries and the payload-type table its pushed packets use."""

    label: str
    role: LegRole
    role_source: str  # vendor_track, api, ...
    codec: str
    payload_types: tuple[PayloadType, ...]
    out_rate: int = 8000
    remote: tuple[str, int] | None = None  # the peer's address, for the record


_NATIVE_NAMES = {
    "PCMU": "PCMU",
    "PCMA": "PCMA",
    "G722": "G722",
    "L16": "L16",
    "OPUS": "opus",
    "CN": "CN",
    "TELEPHONE-EVENT": "telephone-event",
}


def _payload_types(stream: NegotiatedStream) -> list[PayloadType]:
    out = []
    for p in stream.payload_types:
        name = _NATIVE_NAMES.get(p.encoding.upper())
        if name is None:
            continue
        channels = min(max(p.channels, 1), 2)
        out.append(PayloadType(p.pt, name, p.clock_rate, channels))
    return out


class CallController:
    def __init__(
        self,
        media: MediaBackend,
        publisher: CallPublisher,
        admission: CallAdmission | None = None,
        tenants: TenantResolver | None = None,
        call_states: CallStates | None = None,
        leg_roles: LegRoleStats | None = None,
    ) -> None:
        self.media = media
        self.publisher = publisher
        self.admission = admission
        self.tenants = tenants or TenantResolver()
        self.call_states = call_states or CallStates()
        self.leg_roles = leg_roles or LegRoleStats()
        self.calls: dict[str, Call] = {}
        self.ending: dict[str, Call] = {}  # ended, their legs' buffered audio playing out
        self.draining = False
        # runs a callable on the thread that owns this controller; the bridge sets its
        # loop's call_soon_threadsafe (the media's playout thread ends drained calls)
        self.defer: Callable[[Callable[[], None]], object] = call_now

    # ---- lifecycle -------------------------------------------------------------------

    def start_call(
        self,
        setup: CallSetup,
        streams: list[NegotiatedStream],
        metadata: RecordingMetadata | None = None,
        unanalyzed: str = "",
    ) -> tuple[Call, dict[int, int]]:
        """Open a leg per accepted stream; returns the call and m-line index -> port.
        Raises CapacityError (nothing left open) when a leg cannot be opened."""
        call = Call(
            "call_" + secrets.token_hex(8),
            setup.kind,
            setup.sip_call_id,
            setup.ani,
            setup.dnis,
            setup.correlation_id,
            dict(setup.external_ids),
            unanalyzed=unanalyzed,
            identity=setup.identity,
        )
        if metadata is not None:
            self._apply_metadata(call, metadata, starting=True)
        self._apply_state(call, setup.call_state, starting=True)
        self._state_roles(call, setup.leg_roles_said)
        self._resolve_tenant(call, setup)
        admitted = self.admission is not None and not unanalyzed
        if admitted and self.admission is not None:
            call.unanalyzed = unanalyzed = self.admission.admit(call)  # may refuse
            admitted = not unanalyzed
        try:
            ports = self._sync_legs(call, streams, metadata)
        except CapacityError:
            for leg_id in list(call.legs):
                self.media.close_leg(leg_id)
            if admitted and self.admission is not None:
                self.admission.release(call)
            raise
        for leg in call.legs.values():
            if leg.index in setup.leg_roles:
                leg.role, leg.role_source = setup.leg_roles[leg.index], "api"
        self.calls[call.call_id] = call
        log.info("call %s started (%s, %d legs)", call.call_id, call.kind, len(call.legs))
        self._emit(call, "started", f"unanalyzed:{unanalyzed}" if unanalyzed else "")
        if call.legs and all(leg.paused for leg in call.legs.values()):
            self._emit(call, "held", "")
        return call, ports

    def start_pushed_call(
        self, setup: CallSetup, legs: Sequence[PushedLegSpec], unanalyzed: str = ""
    ) -> tuple[Call, dict[str, PushedLeg]]:
        """A call whose legs an adapter feeds; returns the call and label -> where to
        push. Raises CapacityError (nothing left open) when a leg cannot be opened."""
        call = Call(
            "call_" + secrets.token_hex(8),
            setup.kind,
            setup.sip_call_id,
            setup.ani,
            setup.dnis,
            setup.correlation_id,
            dict(setup.external_ids),
            unanalyzed=unanalyzed,
        )
        self._apply_state(call, setup.call_state, starting=True)
        self._resolve_tenant(call, setup)
        admitted = self.admission is not None and not unanalyzed
        if admitted and self.admission is not None:
            call.unanalyzed = unanalyzed = self.admission.admit(call)  # may refuse
            admitted = not unanalyzed
        handles: dict[str, PushedLeg] = {}
        try:
            for index, spec in enumerate(legs):
                leg_id = f"{call.call_id}.{index}"
                handles[spec.label] = self.media.open_pushed_leg(
                    leg_id, spec.payload_types, spec.out_rate
                )
                call.legs[leg_id] = Leg(
                    leg_id,
                    index,
                    spec.label,
                    spec.role,
                    spec.role_source,
                    spec.codec,
                    0,
                    spec.remote,
                )
        except CapacityError:
            for leg_id in list(call.legs):
                self.media.close_leg(leg_id)
            if admitted and self.admission is not None:
                self.admission.release(call)
            raise
        self.calls[call.call_id] = call
        log.info("call %s started (%s, %d pushed legs)", call.call_id, call.kind, len(legs))
        self._emit(call, "started", f"unanalyzed:{unanalyzed}" if unanalyzed else "")
        return call, handles

    def set_call_paused(self, call_id: str, paused: bool, reason: str = "") -> None:
        """Pause or resume every leg of a call (AudioHook secure pause, the control API):
        audio and DTMF are discarded in C while paused, and the gap counts as a pause,
        not as loss. Emits ``held`` / ``resumed`` on a change."""
        call = self.calls[call_id]
        changed = False
        for leg in call.legs.values():
            if leg.paused != paused:
                self.media.set_paused(leg.leg_id, paused)
                leg.paused = paused
                changed = True
        if changed:
            self._emit(call, "held" if paused else "resumed", reason)

    def update_call(
        self,
        call_id: str,
        streams: list[NegotiatedStream] | None,
        metadata: RecordingMetadata | None = None,
        call_state: StateHint | None = None,
        leg_roles: RoleStatement | None = None,
    ) -> dict[int, int]:
        """A re-INVITE/UPDATE: new streams, codecs, ports, direction, metadata, call
        state or leg roles (one event for all of it)."""
        call = self.calls[call_id]
        was_held = bool(call.legs) and all(leg.paused for leg in call.legs.values())
        if metadata is not None:
            self._apply_metadata(call, metadata, starting=False)
        self._apply_state(call, call_state, starting=False)
        self._state_roles(call, leg_roles)
        if streams is None:
            ports = {leg.index: leg.local_port for leg in call.legs.values()}
            self._assign_roles(call, metadata)
        else:
            ports = self._sync_legs(call, streams, metadata)
        held = bool(call.legs) and all(leg.paused for leg in call.legs.values())
        if held and not was_held:
            self._emit(call, "held", "")
        elif was_held and not held:
            self._emit(call, "resumed", "")
        else:
            self._emit(call, "updated", "")
        return ports

    def set_call_state(self, call_id: str, hint: StateHint) -> Verdict:
        """The PBX's word on a live call (SIP INFO, the control API), nothing else
        changing: counted, applied, ``updated`` emitted when the call was answered now.
        KeyError: no such call."""
        call = self.calls[call_id]
        was_early = call.early_media
        verdict = self._apply_state(call, hint, starting=False)
        if was_early != call.early_media:
            self._emit(call, "updated", "answered")
        return verdict

    def set_leg_roles(self, call_id: str, said: dict[str, str]) -> Reason | None:
        """The control API's roles for a live plain SIP call's legs (``said``: leg id
        or m-line index -> role), all or nothing: kept per m-line above anything SIP
        says until the line is removed, ``updated`` emitted when a role changed. A
        refusal is counted (origin ``api``) and returned, nothing changed. KeyError: no
        such call."""
        call = self.calls[call_id]
        if call.kind != "sip":
            self.leg_roles.reject("api", "not_plain_sip", call_id)
            return "not_plain_sip"
        read = read_api(said, {leg.leg_id: leg.index for leg in call.legs.values()})
        if isinstance(read, str):
            self.leg_roles.reject("api", read, call_id)
            return read
        before = {leg.leg_id: leg.role for leg in call.legs.values()}
        call.stated_roles.update({i: (role, "api") for i, role in read.items()})
        self.leg_roles.count(Decision(said=tuple(("api", r) for r in read.values())), None, "")
        self._assign_roles(call, None)
        if before != {leg.leg_id: leg.role for leg in call.legs.values()}:
            self._emit(call, "updated", "leg_roles")
        return None

    def check_call_state(self, call_id: str | None, hint: StateHint) -> Verdict:
        """How ``hint`` would be judged for a live call (None: a call about to start),
        without counting or applying it (the control API refuses before changing
        anything; it counts the refusal with ``call_states.count``)."""
        call = self.calls.get(call_id) if call_id is not None else None
        early = call.early_media if call is not None else False
        return judge(hint, early_now=early, starting=call is None)

    def end_call(self, call_id: str, reason: str) -> None:
        """The call is over: it leaves ``calls`` now; its "ended" event follows once the
        audio its legs' jitter buffers hold has been played out to the analysis (at most
        the buffer's ceiling, typically 40-100 ms; at once when nothing is buffered)."""
        call = self.calls.pop(call_id, None)
        if call is None:
            return
        call.state = "ending"
        self.ending[call_id] = call

        def played_out() -> None:
            self.defer(lambda: self._ended(call, reason))

        if self.media.drain_legs(list(call.legs), played_out):
            self._ended(call, reason)

    def _ended(self, call: Call, reason: str) -> None:
        self.ending.pop(call.call_id, None)
        call.state, call.end_reason = "ended", reason
        log.info("call %s ended (%s)", call.call_id, reason)
        self._emit(call, "ended", reason)

    def timed_out(self, now_ns: int, timeout_ns: int) -> list[str]:
        """Calls none of whose unpaused legs received RTP for ``timeout_ns``."""
        out = []
        for call in self.calls.values():
            live = [leg for leg in call.legs.values() if not leg.paused]
            if live and all(self.media.idle_ns(leg.leg_id, now_ns) >= timeout_ns for leg in live):
                out.append(call.call_id)
        return out

    # ---- internals ---------------------------------------------------------------------

    def _resolve_tenant(self, call: Call, setup: CallSetup) -> None:
        """Before admission: the alert policy's scope and the tenant's modes need it.
        A SIPREC call's DNIS is the recorded callee's (metadata), not the SRS's."""
        if call.metadata is not None:
            _siprec_parties(call, call.metadata)
        resolved = self.tenants.resolve(setup.tenant_hints, setup.source, call.dnis, call.call_id)
        call.tenant, call.tenant_source = resolved.tenant, resolved.source

    def _sync_legs(
        self,
        call: Call,
        streams: list[NegotiatedStream],
        metadata: RecordingMetadata | None,
    ) -> dict[int, int]:
        by_index = {leg.index: leg for leg in call.legs.values()}
        ports: dict[int, int] = {}
        for s in streams:
            leg = by_index.pop(s.index, None)
            pts = _payload_types(s)
            if not s.accepted:
                if leg is not None:
                    self.media.close_leg(leg.leg_id)
                    del call.legs[leg.leg_id]
                    call.stated_roles.pop(s.index, None)  # a re-used line starts afresh
                continue
            remote = (s.remote_host, s.remote_port) if s.remote_host else None
            source = (s.remote_host, 0) if s.remote_host else None
            if leg is None:
                leg_id = f"{call.call_id}.{s.index}"
                port = self.media.open_leg(leg_id, pts, source, s.srtp, remote=remote, ssrc=s.ssrc)
                leg = Leg(
                    leg_id, s.index, s.label, LegRole.UNKNOWN, "m_line_guess", s.codec, port, remote
                )
                call.legs[leg_id] = leg
                leg.payload_types, leg.ssrc = tuple(pts), s.ssrc
                if not s.peer_sends:
                    self.media.set_paused(leg_id, True)
                    leg.paused = True
            else:
                if remote != leg.remote or tuple(pts) != leg.payload_types or s.ssrc != leg.ssrc:
                    self.media.update_leg(leg.leg_id, pts, source, remote=remote, ssrc=s.ssrc)
                leg.remote, leg.codec, leg.label, leg.ssrc = remote, s.codec, s.label, s.ssrc
                if self.media.set_srtp(leg.leg_id, s.srtp):
                    log.info("leg %s re-keyed (SRTP)", leg.leg_id)
                leg.payload_types = tuple(pts)
                if leg.paused == s.peer_sends:
                    self.media.set_paused(leg.leg_id, not s.peer_sends)
                    leg.paused = not s.peer_sends
            ports[s.index] = leg.local_port
        for gone in by_index.values():  # m-lines no longer offered
            self.media.close_leg(gone.leg_id)
            del call.legs[gone.leg_id]
            call.stated_roles.pop(gone.index, None)
        self._assign_roles(call, metadata)
        return ports

    def _apply_state(self, call: Call, hint: StateHint | None, *, starting: bool) -> Verdict:
        """The PBX's call state (``sip_bridge.call_state``): judged, counted, applied;
        ``early`` only at the start or while still early (never back after answer).
        Only what is new is counted: a state the call already has from that origin is
        not counted again, and a statement repeating the origin's last one with the same
        outcome (an RFC 4028 session refresh, a SIPREC SRC re-sending its metadata)
        counts nothing, refusals included."""
        if hint is None:
            return Verdict()
        verdict = judge(hint, early_now=call.early_media, starting=starting)
        said = (hint.values, verdict)
        if not restated(call.statements, f"call_state:{hint.origin}", said):
            counted = state_taken(verdict, hint.origin, call.state_said)
            self.call_states.count(hint, counted, call.call_id)
        if verdict.state is not None:
            call.early_media = verdict.state == "early"
            call.state_said = (verdict.state, hint.origin)
        return verdict

    def _state_roles(self, call: Call, statement: RoleStatement | None) -> None:
        """What a plain SIP request said about its legs (``sip_bridge.leg_roles``):
        decided, counted, kept by m-line index (applied by ``_assign_roles``). A SIPREC
        call's header is counted and ignored (its metadata decides). Only what is new is
        counted: a role a line already has from that origin is not counted again, and a
        statement the same as the call's last one (an RFC 4028 session refresh re-sends
        its SDP and headers every few minutes) counts nothing, refusals included."""
        if statement is None:
            return
        again = restated(call.statements, "leg_roles", statement)
        if call.kind != "sip":
            said = statement.header is not None and any(e.strip() for e in statement.header)
            if said and not again:
                self.leg_roles.reject("sip_header", "siprec", call.call_id)
            return
        decision = decide(statement)
        if not again:
            self.leg_roles.count(taken(decision, call.stated_roles), statement.header, call.call_id)
        for index, (role, origin) in decision.roles.items():
            held = call.stated_roles.get(index)
            if held is not None and held[1] == "api":  # the API's word stays
                if held[0] is not role and not again:
                    self.leg_roles.reject(origin, "overridden", call.call_id)
                continue
            call.stated_roles[index] = (role, origin)  # a valid header names every line

    def _apply_metadata(self, call: Call, update: RecordingMetadata, *, starting: bool) -> None:
        """Merge SIPREC metadata into the call's. Its call state (an update without one
        keeps the call's) is judged as every origin's is (``siprec_metadata``): an
        update saying early for an answered call is refused (``after_answer``), counted
        and not stored, the call staying answered."""
        if update.call_state:
            word = "early" if update.early else "answered"
            verdict = self._apply_state(
                call, StateHint("siprec_metadata", (word,)), starting=starting
            )
            if verdict.state is None:
                update = replace(update, call_state="")
        previous = call.metadata
        merged = previous.merged(update) if previous is not None else update
        call.caller_participant = merged.caller_id(call.caller_participant, previous)
        call.metadata = merged
        call.participants = [(p.aor, p.name) for p in merged.participants]
        if merged.session_ids and call.correlation_id is None:
            call.correlation_id = merged.session_ids[0]

    def _assign_roles(self, call: Call, update: RecordingMetadata | None) -> None:
        """Roles from the call's (merged) metadata; ``update``: this change brought
        metadata (without, legs keep what earlier metadata said)."""
        metadata = call.metadata if update is not None else None
        roles: dict[str, StreamRole] = (
            metadata.roles(call.caller_participant) if metadata is not None else {}
        )
        for leg in call.legs.values():
            sr = roles.get(leg.label or "")
            if sr is not None and sr.role != "unknown":
                sender = sr.participant.participant_id if sr.participant else ""
                if leg.role_source == "siprec_metadata" and leg.participant != sender:
                    self._rearm(leg)  # a new party on this stream: learn its source
                leg.role, leg.role_source = LegRole(sr.role), "siprec_metadata"
                leg.participant = sender
            elif metadata is None and leg.role_source == "siprec_metadata":
                continue  # keep what earlier metadata said
            elif call.kind == "sip":
                leg.role, leg.role_source = call.stated_roles.get(
                    leg.index, (LegRole.MIXED, "m_line_guess")
                )
        if metadata is not None:
            _siprec_parties(call, metadata)

    def _rearm(self, leg: Leg) -> None:
        """Same port, same codecs: relearn the source with probation (the old source
        stays accepted until a new one passed it)."""
        source = (leg.remote[0], 0) if leg.remote else None
        self.media.update_leg(
            leg.leg_id, leg.payload_types, source, remote=leg.remote, ssrc=leg.ssrc
        )
        log.info("leg %s: new sending participant, source lock re-armed", leg.leg_id)

    def _emit(self, call: Call, event: EventName, reason: str) -> None:
        snapshot = replace(call, legs={k: replace(v) for k, v in call.legs.items()})
        ev = CallEvent(
            call_id=call.call_id,
            event=event,
            at=datetime.now(UTC),
            reason=reason,
            correlation_id=call.correlation_id,
            external_ids=external_ids(call),
            legs={leg.leg_id: leg.role for leg in call.legs.values()},
            identity=call.identity.info() if call.identity and event != "ended" else None,
            tenant=call.tenant,
        )
        try:
            self.publisher.publish(ev, snapshot)
        except Exception:
            log.exception("publishing a call event failed")


def call_now(fn: Callable[[], None]) -> None:
    """CallController.defer when everything runs on one thread."""
    fn()


def external_ids(call: Call) -> dict[str, str]:
    """The ids other systems know the call by; a SIP call's Call-ID as ``sip-call-id``
    (integrators ask for risk by it, issue 12)."""
    ids = dict(call.external_ids)
    if call.sip_call_id:
        ids.setdefault("sip-call-id", call.sip_call_id)
    return ids


def _siprec_parties(call: Call, metadata: RecordingMetadata) -> None:
    """A SIPREC call's ANI and DNIS: the recorded call's parties, from the metadata."""
    if call.kind != "siprec":
        return
    caller = metadata.caller(call.caller_participant)
    others = [p for p in metadata.participants if p is not caller]
    if caller is not None:
        call.ani = _user(caller.aor) or call.ani
    if others:
        call.dnis = _user(others[0].aor) or call.dnis


def _user(aor: str) -> str:
    rest = aor.partition(":")[2] if ":" in aor else aor
    return rest.partition("@")[0].partition(";")[0]
