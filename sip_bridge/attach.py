"""RTP attach without SIP: the control API's request and response models, and the
synchronous operations that turn them into calls on the :class:`CallController`.

A PBX integration (Asterisk ARI ExternalMedia, rtpengine subscribe) creates a monitored
call with its legs (role, codec and payload types, optionally the address the PBX sends
from), gets back one RTP port per leg on the advertised address, changes metadata
(ANI/DNIS, external ids, roles, pause, call state) and ends it. ``call_state``
(``sip_bridge.call_state``): ``early`` at create for a call forked before it is answered
(its windows never alert), ``answered`` by PATCH once it is. Calls that go silent end after the
RTP timeout like SIP calls (the UAS's timer checks every call of the controller).

Pure and synchronous (DESIGN §1): the FastAPI router (``sip_bridge.control_api``) is a
thin shell that calls these on the event loop that owns the controller.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from detectors.alert_schema import LegRole
from sip_bridge.call_state import StateHint
from sip_bridge.calls import Call, CallController, CallSetup
from sip_bridge.sip.offer_answer import NegotiatedStream
from sip_bridge.sip.sdp import RtpMap
from sip_bridge.tenant import Hint

STATIC_PT: dict[str, int] = {"PCMU": 0, "PCMA": 8}
MAX_LEGS = 8
Label = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:\-]+$")]
Text = Annotated[str, Field(max_length=128)]
STATE_DOC = (
    "early: the call is not answered yet (ringback, announcements, an IVR before an "
    "agent): its windows are scored but never alert; answered: from now on they may "
    "(windows starting before this point still never count). Also read: alerting, "
    "ringing, progress, proceeding, ring / answer, up, connected, confirmed, active. "
    "A value the bridge refuses is counted and answered 422 (409: early after answered)"
)


class LegSpec(BaseModel):
    """One RTP stream the PBX will send to us."""

    model_config = ConfigDict(extra="forbid")

    label: Label | None = Field(
        None, description="your name for the leg (unique in the call; default: its index)"
    )
    role: LegRole = Field(
        LegRole.UNKNOWN,
        description="external = the outside party; voice detectors run on external legs only",
    )
    codec: Literal["PCMU", "PCMA"] = Field("PCMU", description="G.711 µ-law or A-law")
    payload_type: int | None = Field(
        None, ge=0, le=127, description="RTP payload type of the audio (default 0 / 8)"
    )
    telephone_event_payload_type: int | None = Field(
        None, ge=96, le=127, description="RFC 4733 DTMF payload type, if the PBX sends it"
    )
    source: str | None = Field(
        None,
        description="IP address the PBX sends from; packets from elsewhere are dropped "
        "(default: the first sender is learned, with probation)",
    )
    paused: bool = Field(False, description="discard this leg's audio (secure pause)")

    @field_validator("source")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)  # ValueError -> 422
        return value

    @model_validator(mode="after")
    def _distinct_pts(self) -> LegSpec:
        if (
            self.telephone_event_payload_type is not None
            and self.telephone_event_payload_type == self.audio_pt
        ):
            raise ValueError("telephone_event_payload_type equals the audio payload type")
        return self

    @property
    def audio_pt(self) -> int:
        return STATIC_PT[self.codec] if self.payload_type is None else self.payload_type


class CallCreate(BaseModel):
    """A monitored call whose RTP a PBX forks to us."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "ani": "+15550123",
                    "dnis": "8005550100",
                    "external_ids": {"asterisk_channel": "1712345678.42"},
                    "legs": [
                        {"label": "caller", "role": "external", "codec": "PCMU"},
                        {"label": "agent", "role": "internal", "codec": "PCMU"},
                    ],
                }
            ]
        },
    )

    legs: list[LegSpec] = Field(min_length=1, max_length=MAX_LEGS)
    ani: Text = Field("", description="calling number (never logged)")
    dnis: Text = Field("", description="called number (never logged)")
    correlation_id: Text | None = Field(
        None, description="merges recordings of the same call (Session-ID, UCID, ...)"
    )
    external_ids: dict[Label, Text] = Field(
        default_factory=dict,
        max_length=16,
        description="the PBX's own ids: Asterisk channel/linkedid, FreeSWITCH uuid, ...",
    )
    tenant: Text | None = Field(
        None,
        description="the client company the call belongs to (a tenant id, "
        "^[a-z0-9][a-z0-9_-]{0,31}$); a value the bridge rejects is counted and the call "
        "takes the configured mapping or default tenant instead: see the response's tenant",
    )
    call_state: str | None = Field(
        None, max_length=1024, description=STATE_DOC + "; absent: answered, no early phase"
    )

    @model_validator(mode="after")
    def _unique_labels(self) -> CallCreate:
        labels = [leg.label or str(i) for i, leg in enumerate(self.legs)]
        if len(set(labels)) != len(labels):
            raise ValueError("leg labels must be unique")
        return self


class LegUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: LegRole | None = None
    paused: bool | None = None


class CallUpdate(BaseModel):
    """Fields to change; absent fields stay. ``external_ids`` merges (null deletes)."""

    model_config = ConfigDict(extra="forbid")

    ani: Text | None = None
    dnis: Text | None = None
    correlation_id: Text | None = None
    external_ids: dict[Label, Text | None] = Field(default_factory=dict, max_length=16)
    legs: dict[str, LegUpdate] = Field(
        default_factory=dict, description="by leg label or leg id", max_length=MAX_LEGS
    )
    call_state: str | None = Field(None, max_length=1024, description=STATE_DOC)


class RtpTarget(BaseModel):
    host: str
    port: int
    external_host: str = Field(description="host:port, as ARI ExternalMedia wants it")


class LegView(BaseModel):
    leg_id: str
    label: str
    role: LegRole
    role_source: str
    codec: str
    payload_type: int
    telephone_event_payload_type: int | None
    paused: bool
    rtp: RtpTarget


class CallView(BaseModel):
    call_id: str
    kind: str
    state: str
    ani: str
    dnis: str
    correlation_id: str | None
    external_ids: dict[str, str]
    unanalyzed: str
    tenant: str = Field(description="the call's tenant, decided when it started")
    tenant_source: str = Field(
        description="what decided it: api, dnis_prefix, sip_source or default"
    )
    rtp_timeout_s: float = Field(description="the call ends after this long without RTP")
    early_media: bool = Field(False, description="not answered yet: its windows never alert")
    legs: list[LegView]


class UnknownLegError(KeyError):
    """A PATCH names a leg the call does not have."""


@dataclass
class AttachedCalls:
    """Calls created through the control API, on one controller (not thread-safe: use
    it from the thread or event loop that owns the controller)."""

    controller: CallController
    advertised_host: str
    rtp_timeout_s: float
    specs: dict[str, tuple[NegotiatedStream, ...]] = field(default_factory=dict)

    def create(self, spec: CallCreate) -> Call:
        """Open the legs; raises CapacityError when a port or stream is not free."""
        streams = tuple(_stream(i, leg) for i, leg in enumerate(spec.legs))
        setup = CallSetup(
            "api",
            ani=spec.ani,
            dnis=spec.dnis,
            correlation_id=spec.correlation_id,
            external_ids=dict(spec.external_ids),
            leg_roles={i: leg.role for i, leg in enumerate(spec.legs)},
            tenant_hints=(Hint("api", (spec.tenant,)),) if spec.tenant is not None else (),
            call_state=state_hint(spec.call_state),
        )
        call, _ = self.controller.start_call(setup, list(streams))
        self._forget_ended()
        self.specs[call.call_id] = streams
        return call

    def get(self, call_id: str) -> Call | None:
        call = self.controller.calls.get(call_id)
        return call if call is not None and call_id in self.specs else None

    def live(self) -> list[Call]:
        self._forget_ended()
        return [self.controller.calls[c] for c in self.specs]

    def update(self, call_id: str, change: CallUpdate) -> Call:
        """Apply a PATCH; emits updated, held or resumed. KeyError: no such call;
        UnknownLegError: no such leg (nothing changed)."""
        call = self.get(call_id)
        if call is None:
            raise KeyError(call_id)
        by_name = {leg.label or "": leg for leg in call.legs.values()} | call.legs
        missing = [name for name in change.legs if name not in by_name]
        if missing:
            raise UnknownLegError(missing[0])
        if change.ani is not None:
            call.ani = change.ani
        if change.dnis is not None:
            call.dnis = change.dnis
        if change.correlation_id is not None:
            call.correlation_id = change.correlation_id
        for key, value in change.external_ids.items():
            if value is None:
                call.external_ids.pop(key, None)
            else:
                call.external_ids[key] = value
        paused = {leg.index: leg.paused for leg in call.legs.values()}
        for name, leg_change in change.legs.items():
            leg = by_name[name]
            if leg_change.role is not None:
                leg.role, leg.role_source = leg_change.role, "api"
            if leg_change.paused is not None:
                paused[leg.index] = leg_change.paused
        streams = [_with_direction(s, paused.get(s.index, False)) for s in self.specs[call_id]]
        self.specs[call_id] = tuple(streams)
        self.controller.update_call(call_id, streams, call_state=state_hint(change.call_state))
        return call

    def end(self, call_id: str, reason: str = "api") -> bool:
        if self.get(call_id) is None:
            return False
        self.controller.end_call(call_id, reason)
        self.specs.pop(call_id, None)
        return True

    def view(self, call: Call) -> CallView:
        streams = {s.index: s for s in self.specs.get(call.call_id, ())}
        legs = []
        for leg in sorted(call.legs.values(), key=lambda leg: leg.index):
            s = streams.get(leg.index)
            pts = s.payload_types if s is not None else ()
            audio = next((p.pt for p in pts if p.encoding == leg.codec), -1)
            dtmf = next((p.pt for p in pts if p.encoding == "telephone-event"), None)
            legs.append(
                LegView(
                    leg_id=leg.leg_id,
                    label=leg.label or str(leg.index),
                    role=leg.role,
                    role_source=leg.role_source,
                    codec=leg.codec,
                    payload_type=audio,
                    telephone_event_payload_type=dtmf,
                    paused=leg.paused,
                    rtp=RtpTarget(
                        host=self.advertised_host,
                        port=leg.local_port,
                        external_host=host_port(self.advertised_host, leg.local_port),
                    ),
                )
            )
        return CallView(
            call_id=call.call_id,
            kind=call.kind,
            state=call.state,
            ani=call.ani,
            dnis=call.dnis,
            correlation_id=call.correlation_id,
            external_ids=dict(call.external_ids),
            unanalyzed=call.unanalyzed,
            tenant=call.tenant,
            tenant_source=call.tenant_source,
            rtp_timeout_s=self.rtp_timeout_s,
            early_media=call.early_media,
            legs=legs,
        )

    def _forget_ended(self) -> None:
        """Drop calls the controller ended on its own (RTP timeout, draining)."""
        for call_id in [c for c in self.specs if c not in self.controller.calls]:
            del self.specs[call_id]


def state_hint(value: str | None) -> StateHint | None:
    """The API's ``call_state`` as a hint (None: absent)."""
    return StateHint("api", (value,)) if value is not None else None


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _stream(index: int, leg: LegSpec) -> NegotiatedStream:
    pts = [RtpMap(leg.audio_pt, leg.codec, 8000)]
    if leg.telephone_event_payload_type is not None:
        pts.append(RtpMap(leg.telephone_event_payload_type, "telephone-event", 8000))
    return NegotiatedStream(
        index,
        True,
        tuple(pts),
        remote_host=leg.source or "",
        remote_direction="inactive" if leg.paused else "sendonly",
        label=leg.label or str(index),
    )


def _with_direction(stream: NegotiatedStream, paused: bool) -> NegotiatedStream:
    return replace(stream, remote_direction="inactive" if paused else "sendonly")
