"""Evidence around an alert (issue 11), opt-in per tenant: the external leg's audio clip
(``clip``), the call's aggregated speaker embedding (``embedding``), or both.

Pure (pydantic, ``cryptography``, the standard library): the bridge seals, the dashboard
opens and serves WAV without numpy. Everything here is about *one* record:

- ``EvidenceSettings`` (``CALLSHIELD_EVIDENCE_*``): the mode per tenant (default
  ``off``: nothing is kept), how much audio before and after the alert's window, the
  time to live (7 days), the in-memory ring per recorded leg, and the evidence key.
- ``EvidenceVault``: AES-256-GCM under a sub-key (HKDF-SHA256) of the 32-byte evidence
  key, a fresh 96-bit nonce per record, the record's id and call id as associated data
  (a blob cannot be moved to another call or record). The key comes from a secret spec
  (``CALLSHIELD_EVIDENCE_KEY=file:/path`` or ``env:NAME``) or, on one box, from
  ``<state_dir>/evidence.key`` created 0600; never from Redis.
- ``EvidenceMeta``: what is stored beside the ciphertext, in clear: ids, times (UTC and
  offsets from the call's start), sizes. Never audio, never an embedding, never a number.
- ``wav_bytes``: 16-bit mono PCM as a WAV file (what the dashboard plays).

Time bases: ``start_s``/``end_s`` are offsets on the leg's clock, the one alerts'
reasons use (``Reason.start_s``: time since the leg's audio started); ``leg_started_at``
is that clock's zero in UTC, ``call_started_at`` the call's ``started`` event, so
``call_offset_s`` lines the clip up with the contact center's own recording of the call.
"""

from __future__ import annotations

import io
import secrets
import wave
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.bus.key_file import load_key

_VERSION = b"e1"
CLIP_RATE = 8000


class EvidenceMode(StrEnum):
    OFF = "off"
    CLIP = "clip"
    EMBEDDING = "embedding"
    CLIP_AND_EMBEDDING = "clip_and_embedding"

    @property
    def clip(self) -> bool:
        return self in (EvidenceMode.CLIP, EvidenceMode.CLIP_AND_EMBEDDING)

    @property
    def embedding(self) -> bool:
        return self in (EvidenceMode.EMBEDDING, EvidenceMode.CLIP_AND_EMBEDDING)


class EvidenceKind(StrEnum):
    CLIP = "clip"
    EMBEDDING = "embedding"


class EvidenceSettings(BaseSettings):
    """Read by the bridge (what to keep) and the dashboard (the key, to open it)."""

    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_EVIDENCE_", extra="ignore")

    # per tenant, e.g. CALLSHIELD_EVIDENCE_TENANT_MODES='{"default": "clip"}'
    mode: EvidenceMode = EvidenceMode.OFF
    tenant_modes: dict[str, EvidenceMode] = Field(default_factory=dict)
    pre_s: float = Field(default=10.0, ge=0.0, le=60.0)  # before the alert's window
    post_s: float = Field(default=5.0, ge=0.0, le=30.0)  # after it
    ttl_s: int = Field(default=7 * 24 * 3600, ge=1)  # unless on legal hold
    # a call's index of what was kept (no content) outlives the evidence by this much,
    # so the dashboard can say *why* something is gone ("expired on ...")
    receipt_grace_s: int = Field(default=30 * 24 * 3600, ge=0)
    # the per-leg ring of recent external-leg audio (8 kHz int16: 16 kB per second)
    ring_s: float = Field(default=40.0, ge=5.0, le=300.0)
    queue_max: int = Field(default=256, ge=1)  # records waiting for Redis, then dropped
    # 32-byte key as a secret spec (file:/path, env:NAME): 64 hex chars or base64;
    # unset: <state_dir>/evidence.key created 0600 (one box: bridge and dashboard share it)
    key: SecretStr | None = None

    def mode_for(self, tenant: str) -> EvidenceMode:
        return self.tenant_modes.get(tenant, self.mode)


class EvidenceMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EvidenceKind
    evidence_id: str = Field(min_length=1, max_length=600)  # "clip:<alert_id>", "embedding"
    tenant: str
    call_id: str
    node_id: str
    alert_id: str | None = None
    leg_id: str | None = None
    created_at: datetime
    expires_at: datetime
    call_started_at: datetime | None = None  # UTC of the call's ``started`` event
    leg_started_at: datetime | None = None  # UTC of the leg clock's zero
    start_s: float = Field(default=0.0, ge=0.0)  # leg clock, as alerts' reasons
    end_s: float = Field(default=0.0, ge=0.0)
    alert_start_s: float | None = None  # the alert's own window on the same clock
    alert_end_s: float | None = None
    sample_rate: int = CLIP_RATE
    samples: int = Field(default=0, ge=0)
    paused_s: float = Field(default=0.0, ge=0.0)  # paused audio, zeroed, never kept
    model: str = ""  # embedding: the speaker model's name@version
    dim: int = Field(default=0, ge=0)
    net_speech_s: float = Field(default=0.0, ge=0.0)

    @property
    def call_offset_s(self) -> float | None:
        """``start_s`` as an offset from the call's ``started`` event."""
        if self.call_started_at is None or self.leg_started_at is None:
            return None
        return (self.leg_started_at - self.call_started_at).total_seconds() + self.start_s

    def utc(self, offset_s: float) -> datetime | None:
        """A leg-clock offset as UTC."""
        if self.leg_started_at is None:
            return None
        return self.leg_started_at + timedelta(seconds=offset_s)

    def public(self) -> dict[str, object]:
        start, end = self.utc(self.start_s), self.utc(self.end_s)
        return self.model_dump(mode="json") | {
            "call_offset_s": self.call_offset_s,
            "start_utc": start.isoformat() if start else None,
            "end_utc": end.isoformat() if end else None,
        }


class EvidenceVault:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the evidence key must be 32 bytes")
        sub = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"callshield evidence"
        ).derive(key)
        self._aead = AESGCM(sub)

    @staticmethod
    def _aad(meta: EvidenceMeta) -> bytes:
        return b"|".join(
            (_VERSION, meta.kind.encode(), meta.call_id.encode(), meta.evidence_id.encode())
        )

    def seal(self, meta: EvidenceMeta, plain: bytes) -> bytes:
        nonce = secrets.token_bytes(12)
        return _VERSION + nonce + self._aead.encrypt(nonce, plain, self._aad(meta))

    def open(self, meta: EvidenceMeta, blob: bytes) -> bytes:
        """ValueError for a blob of another key, call, record or version."""
        if blob[:2] != _VERSION or len(blob) < 2 + 12 + 16:
            raise ValueError("not an evidence blob of this version")
        try:
            return self._aead.decrypt(blob[2:14], blob[14:], self._aad(meta))
        except InvalidTag:
            raise ValueError("evidence does not open with this key for this record") from None


def load_evidence_vault(settings: EvidenceSettings, state_dir: Path) -> EvidenceVault:
    """``settings.key`` (a secret spec), else ``<state_dir>/evidence.key`` created 0600."""
    key = load_key(settings.key, "CALLSHIELD_EVIDENCE_KEY", state_dir / "evidence.key")
    return EvidenceVault(key)


def wav_bytes(pcm16le: bytes, rate: int = CLIP_RATE) -> bytes:
    """Mono 16-bit PCM (little-endian) as a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16le)
    return out.getvalue()
