"""The versioned wire schema of what CallShield publishes: alerts, score updates and
call events (DESIGN §5–§6).

Pure pydantic, no numpy: the dashboard and the webhook dispatcher import this module
and nothing else from the media side. ``SCHEMA_VERSION`` changes with any field change
that a consumer could notice; JSON Schema files are generated from these models.

Ids are deterministic (``alert_id_for``), so a retried publish never creates a second
alert; an escalation is a new ``revision`` of the same alert.

Compatibility (a rolling upgrade runs old readers beside new writers): within one major
version a change only adds optional fields, and bumps the minor. A reader takes any
``1.x`` object, ignores the fields it does not know (at any depth) and holds it as its
own version (``SCHEMA_VERSION``: what it re-publishes, e.g. to webhooks, is what it
understood). Another major version does not validate (the stream codec's
``UnsupportedSchemaVersionError``): every reader counts and drops such an entry.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

SCHEMA_VERSION: Final = "1.0"
MAJOR: Final = SCHEMA_VERSION.split(".")[0]
NEWER_MAJOR = "unsupported schema major version"  # in the error a reader counts


def _same_major(value: object) -> object:
    """Any ``<MAJOR>.<minor>`` reads as this reader's version; another major fails."""
    if isinstance(value, str):
        major, dot, minor = value.partition(".")
        if dot and minor.isdigit() and major.isdigit():
            if major != MAJOR:
                raise ValueError(
                    f"{NEWER_MAJOR} {value!r}: this reader reads {MAJOR}.x "
                    "(upgrade it before the writers)"
                )
            return SCHEMA_VERSION
    return value  # anything else fails the literal as before


SchemaVersion = Annotated[
    Literal["1.0"],
    BeforeValidator(_same_major),
    WithJsonSchema({"type": "string", "pattern": rf"^{MAJOR}\.[0-9]+$"}),
]


class Dimension(StrEnum):
    SYNTHETIC_VOICE = "synthetic_voice"
    KNOWN_FRAUDSTER = "known_fraudster"
    VOICE_MISMATCH = "voice_mismatch"
    REPLAY = "replay"
    CALLER_ID = "caller_id"
    DTMF_BEHAVIOUR = "dtmf_behaviour"
    SPEECH_ACTIVITY = "speech_activity"


class Band(StrEnum):
    LOW = "low"
    ELEVATED = "elevated"
    HIGH = "high"


class CallState(StrEnum):
    LIVE = "live"
    ENDED = "ended"


class LegRole(StrEnum):
    EXTERNAL = "external"
    INTERNAL = "internal"
    MIXED = "mixed"
    UNKNOWN = "unknown"


class Abstention(StrEnum):
    TOO_LITTLE_SPEECH = "too_little_speech"
    TONE_OR_MUSIC = "tone_or_music"
    TOO_MUCH_CONCEALED = "too_much_concealed"
    PAUSED = "paused"
    LEG_UNKNOWN = "leg_unknown"
    UNAVAILABLE = "unavailable"  # the detector failed or missed its deadline
    ECHO = "echo"  # the external leg carries the internal leg's audio (speakerphone echo)
    ALLOWLISTED = "allowlisted"  # the contact center's own benign audio (prompts, music)
    # the tenant's biometrics_mode leaves this out (off: the speaker model is not run;
    # watchlist_only: no voice verification); not a coverage loss
    BIOMETRICS_OFF = "biometrics_off"
    NO_ENROLMENT = "no_enrolment"  # nothing to verify against: no enrolled account claimed


Score = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]


class _Wire(BaseModel):
    # unknown fields are a newer minor version's additions: ignored (module docstring)
    model_config = ConfigDict(frozen=True, extra="ignore")


class Reason(_Wire):
    """One piece of evidence: which dimension, when in the call, how strong."""

    dimension: Dimension
    start_s: Seconds  # offset from the call's start
    end_s: Seconds
    score: Score
    detail: str = ""


class WindowQuality(_Wire):
    """Jitter-buffer quality of the audio behind a score."""

    concealed_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    late_packets: int = 0
    jitter_ms: float = 0.0
    # received audio above the speech gate: the policy's minimum net speech is checked
    # against it, and calibration replays the policy over stored scores with it
    net_speech_s: Seconds = 0.0


class Alert(_Wire):
    schema_version: SchemaVersion = SCHEMA_VERSION
    kind: Literal["alert"] = "alert"
    alert_id: str
    revision: int = Field(ge=1)
    call_id: str
    correlation_id: str | None = None
    external_ids: dict[str, str] = Field(default_factory=dict)
    tenant: str = "default"
    node_id: str
    dimension: Dimension
    band: Band
    score: Score
    threshold: Score
    episode: int = Field(ge=0)
    reasons: tuple[Reason, ...]
    call_state: CallState = CallState.LIVE
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    policy_version: str
    model_versions: dict[str, str] = Field(default_factory=dict)
    provider: str
    thresholds: dict[str, float] = Field(default_factory=dict)


class ScoreUpdate(_Wire):
    schema_version: SchemaVersion = SCHEMA_VERSION
    kind: Literal["score"] = "score"
    call_id: str
    leg_id: str
    dimension: Dimension
    window_start_s: Seconds
    window_end_s: Seconds
    score: Score | None  # None when abstained
    abstained: Abstention | None = None
    quality: WindowQuality = WindowQuality()
    model_version: str = ""
    provider: str = ""


class LegCoverage(_Wire):
    """What one leg's jitter buffer played out over the call (20 ms frames by kind)."""

    role: LegRole
    media_s: Seconds = 0.0  # decoded from received audio
    concealed_s: Seconds = 0.0  # loss or underrun concealed
    cng_s: Seconds = 0.0  # comfort noise / DTX
    paused_s: Seconds = 0.0  # secure pause / hold: discarded, not loss
    not_started_s: Seconds = 0.0  # before the first packet (or while prefetching)
    time_to_first_packet_s: Seconds | None = None  # None: no media at all
    packets_received: int = Field(default=0, ge=0)
    packets_lost: int = 0  # RFC 3550 cumulative (negative with duplicates)
    packets_late: int = Field(default=0, ge=0)
    analysed: bool = False  # its audio reached at least one detector
    # no packet arrived and no media frame played while the leg was not paused: the
    # sender never sent, or the media went elsewhere (NAT, wrong SDP address)
    silent: bool = False


class DimensionCoverage(_Wire):
    """How much of a call one dimension actually analysed."""

    windows: int = Field(default=0, ge=0)
    scored_windows: int = Field(default=0, ge=0)
    analysed_speech_s: Seconds = 0.0  # net speech in scored windows, overlaps counted once
    abstentions: dict[Abstention, int] = Field(default_factory=dict)
    unavailable: dict[str, int] = Field(default_factory=dict)  # error, deadline, overrun, stale


CallMedia = Literal["all", "one_way", "none"]
"""Media seen on a call's legs: ``all`` legs carried media, ``one_way`` some did and
at least one stayed silent, ``none`` no leg carried any (or the call had no legs)."""


class CallCoverage(_Wire):
    """Published at hang-up with the ``ended`` event (DESIGN §8): silent loss of
    coverage must be visible. A dimension the node runs that produced no window for an
    analysed call is listed with zero windows."""

    duration_s: Seconds = 0.0
    media: CallMedia = "all"
    analysed: bool = True
    unanalyzed: str = ""  # why not (e.g. capacity: shed under overload)
    detectors: dict[str, str] = Field(default_factory=dict)  # name -> version running
    legs: dict[str, LegCoverage] = Field(default_factory=dict)
    dimensions: dict[Dimension, DimensionCoverage] = Field(default_factory=dict)


class CallNumbers(_Wire):
    """A call's phone numbers, never in clear (``detectors.bus.numbers``): ``sealed`` is
    AES-GCM of its ANI and DNIS under the deployment's numbers key, bound to the call id;
    ``ani_hash`` a keyed hash of the ANI for velocity counting ("" when there is none)."""

    sealed: str
    ani_hash: str = ""


class CallerIdentityInfo(_Wire):
    """What the signalling says about who calls, for caller-id scoring, without any
    number: the STIR/SHAKEN attestation and whether the bridge verified its PASSporT
    (``absent``: no Identity header; ``unverified``: no trust store, unknown x5u or
    compact form; ``failed``: bad signature, stale iat, untrusted chain, tn mismatch,
    malformed), the originating id, redirections, and whether numbers *match* (None
    when one side is missing). The numbers themselves travel only sealed."""

    attestation: Literal["A", "B", "C"] | None = None
    verification: Literal["absent", "verified", "failed", "unverified"] = "absent"
    verification_reason: Annotated[str, Field(max_length=32)] = ""
    origid: Annotated[str, Field(max_length=64)] | None = None
    has_pai: bool = False
    privacy: bool = False  # Privacy: id/user/header asked the number be withheld
    pai_matches_from: bool | None = None
    orig_tn_matches_caller: bool | None = None  # PASSporT orig.tn vs PAI (else From)
    dest_tn_matches_called: bool | None = None  # PASSporT dest.tn vs To
    diversion_count: int = Field(default=0, ge=0)
    diversion_reasons: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=16
    )
    diversion_source: Literal["diversion", "history-info"] | None = None
    original_called_matches_called: bool | None = None  # first dialled vs To


class CallEvent(_Wire):
    schema_version: SchemaVersion = SCHEMA_VERSION
    kind: Literal["call_event"] = "call_event"
    call_id: str
    event: Literal["started", "updated", "held", "resumed", "ended"]
    at: datetime
    reason: str = ""  # e.g. bye, cancel, rtp_timeout, drained, unanalyzed:capacity
    correlation_id: str | None = None
    external_ids: dict[str, str] = Field(default_factory=dict)
    legs: dict[str, LegRole] = Field(default_factory=dict)
    coverage: CallCoverage | None = None  # on ``ended`` only
    numbers: CallNumbers | None = None  # on ``started`` and ``updated`` (bridge-sealed)
    identity: CallerIdentityInfo | None = None  # SIP calls: on every event but ``ended``
    tenant: str = "default"  # the call's tenant, as the bridge resolved it at the start


SystemEventType = Literal["system.coverage.degraded", "system.coverage.recovered"]


class CoverageStatus(_Wire):
    """A dimension's covered ratio over the node's last ended calls, against its
    objective (``detectors.bus.coverage_objective``)."""

    dimension: Dimension
    covered_ratio: Annotated[float, Field(ge=0.0, le=1.0)]
    objective: Annotated[float, Field(ge=0.0, le=1.0)]
    calls: int = Field(ge=0)  # ended calls in the window
    covered_calls: int = Field(ge=0)
    min_speech_s: Seconds  # what counts as covered


class SystemEvent(_Wire):
    """Something about the system rather than one call, e.g. coverage falling below its
    objective (``system.coverage.degraded``) and coming back (``...recovered``): one
    event per transition, delivered by the webhook dispatcher like alerts."""

    schema_version: SchemaVersion = SCHEMA_VERSION
    kind: Literal["system"] = "system"
    event_id: str  # unique per event: the webhook-id
    type: SystemEventType
    node_id: str
    at: datetime
    coverage: CoverageStatus | None = None  # system.coverage.*


def alert_id_for(call_key: str, dimension: Dimension, episode: int) -> str:
    """Deterministic alert id: the same (call or correlation id, dimension, episode)
    always names the same alert, on every node and every retry."""
    digest = hashlib.sha256(f"{call_key}\x1f{dimension.value}\x1f{episode}".encode())
    return "al_" + digest.hexdigest()[:24]


def event_id(alert: Alert) -> str:
    """Webhook event id: one per alert revision, so escalations are not deduplicated."""
    return f"{alert.alert_id}.r{alert.revision}"
