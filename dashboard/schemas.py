"""What the API returns and accepts (pydantic at the trust boundary).

Public models are built from the wire schema (``detectors.alert_schema``) with every
phone number masked; nothing here carries a raw number except ``RevealedNumbers``,
which only the audited reveal route returns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from dashboard.masking import mask_ids, mask_number, mask_text
from detectors.alert_schema import (
    Alert,
    Band,
    CallerIdentityInfo,
    CallState,
    Dimension,
    Reason,
)
from detectors.bus.node_status import NodeStatus

BAND_RANK: dict[Band, int] = {Band.LOW: 0, Band.ELEVATED: 1, Band.HIGH: 2}
Label = Literal["true_positive", "false_positive"]


class ReasonPublic(BaseModel):
    dimension: Dimension
    start_s: float
    end_s: float
    score: float
    detail: str

    @classmethod
    def of(cls, reason: Reason) -> ReasonPublic:
        return cls(
            dimension=reason.dimension,
            start_s=reason.start_s,
            end_s=reason.end_s,
            score=reason.score,
            detail=mask_text(reason.detail),
        )


class Triage(BaseModel):
    status: Literal["new", "acknowledged"] = "new"
    assignee: str | None = None
    ack_by: str | None = None
    ack_at: float | None = None
    label: Label | None = None
    labelled_by: str | None = None


class AlertPublic(BaseModel):
    alert_id: str
    revision: int
    call_id: str
    correlation_id: str | None
    external_ids: dict[str, str]
    tenant: str
    node_id: str
    dimension: Dimension
    band: Band
    score: float
    threshold: float
    episode: int
    reasons: list[ReasonPublic]
    call_state: CallState
    created_at: datetime
    updated_at: datetime
    policy_version: str
    model_versions: dict[str, str]
    provider: str
    triage: Triage = Triage()

    @classmethod
    def of(cls, alert: Alert, triage: Triage | None = None) -> AlertPublic:
        return cls(
            alert_id=alert.alert_id,
            revision=alert.revision,
            call_id=alert.call_id,
            correlation_id=mask_ids({"c": alert.correlation_id})["c"]
            if alert.correlation_id
            else None,
            external_ids=mask_ids(alert.external_ids),
            tenant=alert.tenant,
            node_id=alert.node_id,
            dimension=alert.dimension,
            band=alert.band,
            score=alert.score,
            threshold=alert.threshold,
            episode=alert.episode,
            reasons=[ReasonPublic.of(r) for r in alert.reasons],
            call_state=alert.call_state,
            created_at=alert.created_at,
            updated_at=alert.updated_at,
            policy_version=alert.policy_version,
            model_versions=dict(alert.model_versions),
            provider=alert.provider,
            triage=triage or Triage(),
        )


class CallPublic(BaseModel):
    call_id: str
    state: str  # the last call event: started, updated, held, resumed, ended
    at: datetime | None
    correlation_id: str | None = None
    external_ids: dict[str, str] = Field(default_factory=dict)
    ani: str = ""  # masked
    dnis: str = ""  # masked
    band: Band = Band.LOW
    dimension: Dimension | None = None  # the dimension behind the band
    score: float | None = None
    alerts: int = 0
    # from the newest mid-call claims (PATCH /calls/{id}); None until one names them
    queue: str | None = None
    agent_id: str | None = None
    tenant: str = "default"  # the call's tenant, as the bridge resolved it

    @staticmethod
    def masked(value: str) -> str:
        return mask_number(value)


class DimensionRisk(BaseModel):
    """The latest alert of one dimension on a call."""

    band: Band
    score: float
    threshold: float
    alert_id: str
    revision: int
    updated_at: datetime
    reasons: list[str]  # short texts, for an agent desktop


class CallRisk(BaseModel):
    """What an IVR or agent desktop asks mid-call: how risky is this call now?"""

    call_id: str
    state: str  # started, updated, held, resumed, ended (the last call event)
    band: Band  # the highest band over all dimensions; low when nothing was raised
    dimensions: dict[Dimension, DimensionRisk] = Field(default_factory=dict)
    unanalyzed: str = ""  # why the call is not analysed ("capacity", ...); "" if it is
    correlation_id: str | None = None
    as_of: datetime  # when this answer was read
    tenant: str = "default"


class TimelinePoint(BaseModel):
    t: float  # window end, seconds from the call's start
    score: float


class CallDetail(BaseModel):
    call: CallPublic
    # the signalling's caller-ID facts from the call's last event (STIR/SHAKEN
    # attestation, PASSporT verification, diversions): never a number
    identity: CallerIdentityInfo | None = None
    alerts: list[AlertPublic]
    timeline: dict[str, list[TimelinePoint]]
    abstentions: dict[str, int]
    concealed_ratio: float | None
    jitter_ms: float | None


class RelatedCall(BaseModel):
    """A recent call linked to another by the same ANI hash, watchlist match or voice,
    or by replayed audio."""

    call_id: str
    link: Literal["ani", "voiceprint", "replay"]
    started_at: datetime | None
    why: str


class Comment(BaseModel):
    by: str
    at: float
    text: str


class AssignIn(BaseModel):
    assignee: str = Field(min_length=1, max_length=64)


class CommentIn(BaseModel):
    text: str = Field(min_length=1, max_length=2000)


class LabelIn(BaseModel):
    label: Label
    note: str = Field(default="", max_length=500)


class RevealIn(BaseModel):
    reason: str = Field(min_length=3, max_length=200)


class RevealedNumbers(BaseModel):
    call_id: str
    ani: str
    dnis: str
    external_ids: dict[str, str]


class LoginIn(BaseModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class Me(BaseModel):
    name: str
    role: str
    kind: str
    csrf_token: str = ""
    tenants: list[str] | None = None  # None: platform-wide


class UserIn(BaseModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=12, max_length=1024)
    role: Literal["viewer", "analyst", "admin"]
    # None or empty: platform-wide (only a platform-wide admin may create one)
    tenants: list[str] | None = Field(default=None, max_length=64)


class ApiKeyIn(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    role: Literal["viewer", "analyst", "admin"]
    tenants: list[str] | None = Field(default=None, max_length=64)


class ApiKeyCreated(BaseModel):
    id: str
    key: str  # shown once


class StreamHealth(BaseModel):
    length: int
    last_id: str | None
    last_age_s: float | None
    groups: list[dict[str, int | str | None]] = Field(default_factory=list)


class NodeHealth(BaseModel):
    """A bridge node: ``state`` is its summary's (starting / ready / draining), ``lost``
    without a heartbeat, ``unknown`` with a heartbeat but no summary (an older bridge)."""

    node_id: str
    state: str
    last_seen_s: float | None = None  # age of the summary (one heartbeat at most, when live)
    status: NodeStatus | None = None


class Health(BaseModel):
    redis_ok: bool
    redis_version: str | None = None
    error: str | None = None
    streams: dict[str, StreamHealth] = Field(default_factory=dict)
    live_calls: int = 0
    live_feed_clients: int = 0
    live_feed_behind: int | None = None  # alert entries not yet fanned out
    live_feed_dropped: int = 0  # stream entries this process could not read (counted)
    nodes: list[NodeHealth] = Field(default_factory=list)


class CallFilters(BaseModel):
    """Live-call filters (the API's query parameters and the calls page's form)."""

    band: Band | None = None
    queue: str | None = Field(default=None, min_length=1, max_length=64)
    agent: str | None = Field(default=None, min_length=1, max_length=128)
    since: datetime | None = None  # the call's last event at or after (ISO 8601)
    until: datetime | None = None  # ... at or before
    tenant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, v: object) -> object:
        return None if v == "" else v  # the page's form sends empty fields

    def store_args(self) -> dict[str, Any]:
        utc = {
            name: t if t is None or t.tzinfo else t.replace(tzinfo=UTC)
            for name, t in (("since", self.since), ("until", self.until))
        }
        return {"band": self.band, "queue": self.queue, "agent": self.agent, **utc}
