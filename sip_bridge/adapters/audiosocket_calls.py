"""AudioSocket calls registered through the control API before Asterisk connects.

AudioSocket itself carries no credential: a connection says only a UUID (its first
frame). So the bridge accepts a connection only for a UUID registered beforehand by
an authenticated caller (``POST /v1/audiosocket/calls`` with the control API token,
``sip_bridge.adapters.audiosocket_api``), and only from an allowlisted address (the
TCP server checks that). Registering creates the call at once with one pushed leg per
UUID: an ARI application creates the call, then points ExternalMedia
(``encapsulation=audiosocket``, ``data=<uuid>``) or the ``AudioSocket()`` dialplan
application at the bridge, once per direction (e.g. a snoop channel with ``spy=in`` for
the caller and one with ``spy=out`` for the agent). Each UUID may connect once; the
call ends when every leg that connected has hung up or closed, when the control API
deletes it, or after the RTP timeout if nothing (more) arrives.

Synchronous and not thread-safe: used on the event loop that owns the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field, model_validator

from detectors.alert_schema import LegRole
from sip_bridge.adapters.pcm import l16_payload_types, native_l16_rates
from sip_bridge.attach import MAX_LEGS, Label, Text
from sip_bridge.calls import Call, CallController, CallSetup, PushedLegSpec
from sip_bridge.media import PushedLeg
from sip_bridge.tenant import hints_of

LegState = Literal["waiting", "connected", "ended"]


class AudioSocketLegSpec(BaseModel):
    """One AudioSocket connection (one direction of the call) Asterisk will open."""

    model_config = ConfigDict(extra="forbid")

    label: Label | None = Field(
        None, description="your name for the leg (unique in the call; default: its index)"
    )
    role: LegRole = Field(
        LegRole.UNKNOWN,
        description="external = the outside party; voice detectors run on external legs only",
    )
    uuid: UUID | None = Field(
        None,
        description="the UUID Asterisk sends first (ExternalMedia data / AudioSocket() "
        "argument); default: a fresh random one, returned in the response",
    )


class AudioSocketCallCreate(BaseModel):
    """A monitored call whose legs arrive over AudioSocket."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "ani": "+15550123",
                    "dnis": "8005550100",
                    "external_ids": {"asterisk_linkedid": "1712345678.40"},
                    "legs": [
                        {"label": "caller", "role": "external"},
                        {"label": "agent", "role": "internal"},
                    ],
                }
            ]
        },
    )

    legs: list[AudioSocketLegSpec] = Field(min_length=1, max_length=MAX_LEGS)
    ani: Text = Field("", description="calling number (never logged)")
    dnis: Text = Field("", description="called number (never logged)")
    correlation_id: Text | None = Field(None, description="merges recordings of one call")
    external_ids: dict[Label, Text] = Field(default_factory=dict, max_length=16)
    tenant: Text | None = Field(
        None,
        description="the client company the call belongs to (a tenant id, "
        "^[a-z0-9][a-z0-9_-]{0,31}$); a value the bridge rejects is counted and the call "
        "takes the configured mapping or default tenant instead: see the response's tenant",
    )

    @model_validator(mode="after")
    def _unique(self) -> AudioSocketCallCreate:
        labels = [leg.label or str(i) for i, leg in enumerate(self.legs)]
        if len(set(labels)) != len(labels):
            raise ValueError("leg labels must be unique")
        given = [leg.uuid for leg in self.legs if leg.uuid is not None]
        if len(set(given)) != len(given):
            raise ValueError("leg uuids must be unique")
        return self


class AudioSocketCallUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paused: bool = Field(description="secure pause: discard audio and DTMF of every leg")


class AudioSocketTarget(BaseModel):
    host: str
    port: int
    external_host: str = Field(description="host:port, as ARI ExternalMedia wants it")


class AudioSocketLegView(BaseModel):
    leg_id: str
    label: str
    role: LegRole
    uuid: str
    state: LegState
    paused: bool


class AudioSocketCallView(BaseModel):
    call_id: str
    kind: str
    state: str
    ani: str
    dnis: str
    correlation_id: str | None
    external_ids: dict[str, str]
    unanalyzed: str
    tenant: str = Field(description="the call's tenant, decided when it started")
    tenant_source: str = Field(description="what decided it (sip_bridge.tenant Source)")
    rtp_timeout_s: float = Field(description="the call ends after this long without audio")
    sample_rates: list[int] = Field(description="slin rates accepted (AudioSocket kinds)")
    audiosocket: AudioSocketTarget
    legs: list[AudioSocketLegView]


class UuidInUseError(ValueError):
    """A UUID given at registration belongs to a live call already."""


@dataclass(slots=True)
class RegisteredLeg:
    uuid: UUID
    call_id: str
    leg_id: str
    label: str
    pushed: PushedLeg
    rates: tuple[int, ...]
    state: LegState = "waiting"
    end_reason: str = ""


@dataclass
class AudioSocketCalls:
    """UUID -> leg of a live call, for the calls created through the API."""

    controller: CallController
    rtp_timeout_s: float
    rates: tuple[int, ...] = field(default_factory=native_l16_rates)
    _by_uuid: dict[bytes, RegisteredLeg] = field(default_factory=dict)
    _calls: dict[str, list[RegisteredLeg]] = field(default_factory=dict)

    def create(self, spec: AudioSocketCallCreate) -> Call:
        """Open the call and its legs. CapacityError when the ingest is full;
        UuidInUseError when a given UUID is taken (nothing opened either way)."""
        self._forget_ended()
        ids = [leg.uuid or uuid4() for leg in spec.legs]
        for u in ids:
            if u.bytes in self._by_uuid:
                raise UuidInUseError(str(u))
        labels = [leg.label or str(i) for i, leg in enumerate(spec.legs)]
        pts = l16_payload_types(self.rates)
        specs = [
            PushedLegSpec(label, leg.role, "api", "L16", pts)
            for label, leg in zip(labels, spec.legs, strict=True)
        ]
        setup = CallSetup(
            "audiosocket",
            ani=spec.ani,
            dnis=spec.dnis,
            correlation_id=spec.correlation_id,
            external_ids=dict(spec.external_ids),
            tenant_hints=hints_of("api", spec.tenant),
        )
        call, handles = self.controller.start_pushed_call(setup, specs)
        by_label = {leg.label: leg.leg_id for leg in call.legs.values()}
        legs = [
            RegisteredLeg(u, call.call_id, by_label[label], label, handles[label], self.rates)
            for u, label in zip(ids, labels, strict=True)
        ]
        self._calls[call.call_id] = legs
        for leg in legs:
            self._by_uuid[leg.uuid.bytes] = leg
        return call

    def claim(self, raw_uuid: bytes) -> RegisteredLeg | str:
        """The leg a connection announcing ``raw_uuid`` feeds, or why it may not:
        ``unknown_uuid``, ``uuid_in_use`` (connected now), ``uuid_ended`` (was)."""
        self._forget_ended()
        leg = self._by_uuid.get(raw_uuid)
        if leg is None:
            return "unknown_uuid"
        if leg.state != "waiting":
            return "uuid_in_use" if leg.state == "connected" else "uuid_ended"
        leg.state = "connected"
        return leg

    def release(self, leg: RegisteredLeg, reason: str) -> None:
        """The leg's connection ended; the call ends with the last of its legs (one
        that never connects leaves the call to the RTP timeout)."""
        leg.state, leg.end_reason = "ended", reason
        legs = self._calls.get(leg.call_id, [])
        if legs and all(other.state == "ended" for other in legs):
            self.end(leg.call_id, reason)

    def end(self, call_id: str, reason: str = "api") -> bool:
        self._forget_ended()
        legs = self._calls.pop(call_id, None)
        if legs is None:
            return False
        for leg in legs:
            self._by_uuid.pop(leg.uuid.bytes, None)
        self.controller.end_call(call_id, reason)
        return True

    def get(self, call_id: str) -> Call | None:
        self._forget_ended()
        return self.controller.calls.get(call_id) if call_id in self._calls else None

    def live(self) -> list[Call]:
        self._forget_ended()
        return [self.controller.calls[c] for c in self._calls]

    def set_paused(self, call_id: str, paused: bool) -> None:
        self.controller.set_call_paused(call_id, paused, "api")

    def view(self, call: Call, target: AudioSocketTarget) -> AudioSocketCallView:
        legs = self._calls.get(call.call_id, [])
        return AudioSocketCallView(
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
            sample_rates=list(self.rates),
            audiosocket=target,
            legs=[
                AudioSocketLegView(
                    leg_id=leg.leg_id,
                    label=leg.label,
                    role=call.legs[leg.leg_id].role,
                    uuid=str(leg.uuid),
                    state=leg.state,
                    paused=call.legs[leg.leg_id].paused,
                )
                for leg in legs
                if leg.leg_id in call.legs
            ],
        )

    def _forget_ended(self) -> None:
        """Drop calls the controller ended on its own (RTP timeout, draining)."""
        for call_id in [c for c in self._calls if c not in self.controller.calls]:
            for leg in self._calls.pop(call_id):
                self._by_uuid.pop(leg.uuid.bytes, None)
