"""Watchlist entries, customer enrolments and mid-call claims as they are stored in
Redis (issue 11: voiceprints are biometric data). Pure pydantic and the standard
library: the dashboard manages these records without numpy.

An embedding travels as base64 of little-endian float32 (``encode_embedding``); it is
checked here to be finite and of unit length, so a record that reaches the bridge
always holds a usable voiceprint. API responses never include it (``public()``).

- ``WatchlistEntry``: a fraudster voiceprint. Needs a legal basis, a case reference and
  an expiry; the bridge ignores it once expired.
- ``Enrolment``: a customer's voiceprint under their subject (account) reference.
  Needs the customer's consent reference.
- ``CallUpdate``: a mid-call claim (``PATCH /api/v1/calls/{id}``): claimed account,
  consent reference, queue, agent id; the bridge that owns the call applies it.
"""

from __future__ import annotations

import base64
import math
import re
import secrets
import sys
from array import array
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
SUBJECT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
NORM_TOLERANCE = 1e-3

Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]
Subject = Annotated[str, Field(pattern=SUBJECT_PATTERN)]
Text = Annotated[str, Field(min_length=1, max_length=200)]


class BiometricsMode(StrEnum):
    """Per tenant (issue 11): no voiceprints at all, the watchlist only, or also
    customer verification against enrolments."""

    OFF = "off"
    WATCHLIST_ONLY = "watchlist_only"
    FULL = "full"


def encode_embedding(values: bytes) -> str:
    """float32 little-endian bytes -> base64 text."""
    return base64.b64encode(values).decode("ascii")


def decode_embedding(text: str, dim: int) -> array[float]:
    """base64 text -> float32 values, checked: ``dim`` of them, finite, unit length."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError("embedding is not base64") from None
    if len(raw) != 4 * dim:
        raise ValueError(f"embedding has {len(raw)} bytes, expected {4 * dim} (dim {dim})")
    values = array("f")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    if not all(math.isfinite(v) for v in values):
        raise ValueError("embedding holds a non-finite value")
    norm = math.sqrt(math.fsum(v * v for v in values))
    if abs(norm - 1.0) > NORM_TOLERANCE:
        raise ValueError(f"embedding is not L2-normalised (norm {norm:.4f})")
    return values


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Voiceprint(_Record):
    tenant: Tenant
    model: str = Field(min_length=1, max_length=120)  # the speaker model's name@version
    dim: int = Field(ge=8, le=4096)
    embedding: str  # base64 float32 LE, unit length
    net_speech_s: float = Field(ge=0.0)
    source: str = Field(min_length=1, max_length=200)  # "wav:<name>" or "call:<id>"
    added_by: str = Field(min_length=1, max_length=120)
    created_at: datetime

    @model_validator(mode="after")
    def _check_embedding(self) -> _Voiceprint:
        decode_embedding(self.embedding, self.dim)
        return self

    def vector(self) -> array[float]:
        return decode_embedding(self.embedding, self.dim)

    def public(self) -> dict[str, Any]:
        """Everything but the voiceprint itself (what APIs and logs may show)."""
        return self.model_dump(mode="json", exclude={"embedding"})


class WatchlistEntry(_Voiceprint):
    """``status``: ``pending`` until a second analyst approves it (the two-person rule):
    bridges use ``active`` entries only (and a bridge older than the field fails to parse
    a pending entry, so skips it too)."""

    entry_id: str = Field(pattern=r"^wl_[0-9a-f]{16}$")
    label: Text
    legal_basis: Text  # e.g. "GDPR art. 9(2)(f): legal claims; fraud case 2025-114"
    case_ref: Text  # the consent or case reference behind the listing
    expires_at: datetime
    status: Literal["pending", "active"] = "active"
    approved_by: Annotated[str, Field(min_length=1, max_length=120)] | None = None
    approved_at: datetime | None = None

    @model_validator(mode="after")
    def _expiry_after_creation(self) -> WatchlistEntry:
        if self.expires_at <= self.created_at:
            raise ValueError("expires_at must be after created_at")
        if self.approved_by is not None and self.approved_by == self.added_by:
            raise ValueError("an entry cannot be approved by the analyst who added it")
        if self.status == "pending" and self.approved_by is not None:
            raise ValueError("a pending entry has no approver")
        return self

    @property
    def active(self) -> bool:
        return self.status == "active"

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


class Enrolment(_Voiceprint):
    subject: Subject
    consent_ref: Text
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class CallUpdate(_Record):
    """A mid-call claim for the bridge that owns ``call_id``. Absent fields are left as
    they are; applying the same update twice changes nothing."""

    command_id: str = Field(pattern=r"^cu_[0-9a-f]{16}$")
    call_id: str = Field(min_length=1, max_length=256)
    claimed_account: Subject | None = None
    consent_ref: Text | None = None
    queue: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    agent_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    requested_by: str = Field(min_length=1, max_length=120)
    at: datetime

    @field_validator("call_id")
    @classmethod
    def _printable(cls, v: str) -> str:
        if not re.fullmatch(r"[\x21-\x7e]+", v):
            raise ValueError("call_id must be printable ASCII without spaces")
        return v

    @model_validator(mode="after")
    def _something(self) -> CallUpdate:
        if not self.fields():
            raise ValueError("a call update sets at least one field")
        return self

    def fields(self) -> dict[str, str]:
        names = ("claimed_account", "consent_ref", "queue", "agent_id")
        return {n: v for n in names if (v := getattr(self, n)) is not None}
