"""The benign common audio allowlist, its automatic candidates and the bridges'
shared fingerprint log, as stored in Redis (DESIGN §2; ``detectors.bus.keys``). Pure
pydantic and the standard library: the dashboard manages these records without numpy.

A fingerprint travels as the text of ``detectors.replay.fingerprint.encode``
(``<frames>.<base64 bits>.<base64 validity bitmap>``); ``check_fingerprint`` checks
its shape here so a record that reaches a bridge always decodes.

- ``AllowlistEntry``: the contact center's own audio (IVR prompts, hold music,
  announcements), added by ``callshield allowlist add DIR`` or by an admin confirming a
  candidate. Replay and synthetic_voice ignore windows that match it.
- ``Candidate``: audio a bridge heard on the external legs of many calls from distinct
  ANIs (counted as keyed ANI hashes, never numbers): proposed, never applied, until an
  admin confirms it (then it becomes an entry) or rejects it (it stays, marked, so it is
  not proposed again).
- ``LogRecord``: one stretch of one call's external-leg fingerprint, shared between
  bridges through the ``fp:log`` stream for cross-call replay detection.

``AllowlistStore`` (asyncio) is the dashboard's side; the ``read_*`` functions are the
bridge's (synchronous, on its refresher thread).
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from datetime import datetime
from typing import Annotated, Any, Literal

import redis
import redis.asyncio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from detectors.bus.keys import Keys

log = logging.getLogger(__name__)

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
MAX_FRAMES = 40_000  # 10.7 minutes at 16 ms a frame
CANDIDATE_ID = r"^fc_[0-9a-f]{16}$"
ENTRY_ID = r"^al_[0-9a-f]{16}$"

Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]
Text = Annotated[str, Field(min_length=1, max_length=200)]


def check_fingerprint(text: str) -> int:
    """Frames of an encoded fingerprint; ValueError when it is not one."""
    try:
        count_s, bits_s, valid_s = text.split(".")
        n = int(count_s)
        bits = base64.urlsafe_b64decode(bits_s + "=" * (-len(bits_s) % 4))
        valid = base64.urlsafe_b64decode(valid_s + "=" * (-len(valid_s) % 4))
    except (ValueError, binascii.Error):
        raise ValueError("not an encoded fingerprint") from None
    if not 0 < n <= MAX_FRAMES:
        raise ValueError(f"a fingerprint has 1 to {MAX_FRAMES} frames, not {n}")
    if len(bits) != 4 * n or len(valid) != (n + 7) // 8:
        raise ValueError("encoded fingerprint has the wrong length")
    return n


def new_entry_id() -> str:
    return f"al_{secrets.token_hex(8)}"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("fingerprint", check_fields=False)
    @classmethod
    def _fp(cls, v: str) -> str:
        check_fingerprint(v)
        return v


class AllowlistEntry(_Record):
    entry_id: Annotated[str, Field(pattern=ENTRY_ID)]
    tenant: Tenant = "default"
    label: Text
    source: Text  # file name, or "candidate fc_..."
    origin: Literal["cli", "candidate"] = "cli"
    fingerprint: str
    frames: int = Field(ge=1, le=MAX_FRAMES)
    added_by: Text
    created_at: datetime

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"fingerprint"})


class Candidate(_Record):
    cand_id: Annotated[str, Field(pattern=CANDIDATE_ID)]
    tenant: Tenant = "default"
    fingerprint: str
    frames: int = Field(ge=1, le=MAX_FRAMES)
    distinct_anis: int = Field(ge=0)
    calls: int = Field(ge=0)
    first_seen: datetime
    last_seen: datetime
    node_id: Text
    status: Literal["proposed", "rejected"] = "proposed"

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"fingerprint"})


class LogRecord(_Record):
    clip_id: Text
    node_id: Text
    tenant: Tenant = "default"
    owner: Text  # the call (correlation) key
    ani_hash: Annotated[str, Field(max_length=64)] = ""
    seen_at: float
    start_s: float = Field(ge=0.0)
    fingerprint: str


# ---- the bridge's side (synchronous, off the scoring path) ---------------------------


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def read_version(client: redis.Redis, keys: Keys, tenant: str) -> int:
    raw: Any = client.get(keys.allowlist_version(tenant))
    return int(raw or 0)


def read_allowlist(
    client: redis.Redis, keys: Keys, tenant: str
) -> tuple[int, list[AllowlistEntry], int]:
    """(version, entries, unreadable) read together (one MULTI)."""
    with client.pipeline(transaction=True) as p:
        p.get(keys.allowlist_version(tenant))
        p.hgetall(keys.allowlist(tenant))
        version, raw = p.execute()
    out, bad = [], 0
    for field, body in (raw or {}).items():
        try:
            out.append(AllowlistEntry.model_validate_json(body))
        except ValueError:
            bad += 1
            log.warning("allowlist entry %s does not parse: skipped", _s(field))
    out.sort(key=lambda e: (e.created_at, e.entry_id))
    return int(version or 0), out, bad


def read_candidates(client: redis.Redis, keys: Keys, tenant: str) -> tuple[list[Candidate], int]:
    return _candidates(client.hgetall(keys.allowlist_candidates(tenant)))


def _candidates(raw: Any) -> tuple[list[Candidate], int]:
    out, bad = [], 0
    for field, body in (raw or {}).items():
        try:
            out.append(Candidate.model_validate_json(body))
        except ValueError:
            bad += 1
            log.warning("allowlist candidate %s does not parse: skipped", _s(field))
    out.sort(key=lambda c: (c.first_seen, c.cand_id))
    return out, bad


# ---- the dashboard's side ------------------------------------------------------------


class AllowlistStore:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys) -> None:
        self._r, self._k = client, keys

    async def version(self, tenant: str) -> int:
        raw: Any = await self._r.get(self._k.allowlist_version(tenant))
        return int(raw or 0)

    async def entries(self, tenant: str) -> tuple[list[AllowlistEntry], int]:
        raw: Any = await self._r.hgetall(self._k.allowlist(tenant))
        out, bad = [], 0
        for field, body in raw.items():
            try:
                out.append(AllowlistEntry.model_validate_json(body))
            except ValueError:
                bad += 1
                log.warning("allowlist entry %s does not parse: skipped", _s(field))
        out.sort(key=lambda e: (e.created_at, e.entry_id))
        return out, bad

    async def add(self, entry: AllowlistEntry) -> int:
        """Store the entry and bump the version (one MULTI); the new version."""
        async with self._r.pipeline(transaction=True) as p:
            p.hset(self._k.allowlist(entry.tenant), entry.entry_id, entry.model_dump_json())
            p.incr(self._k.allowlist_version(entry.tenant))
            _, version = await p.execute()
        return int(version)

    async def remove(self, tenant: str, entry_id: str) -> bool:
        async with self._r.pipeline(transaction=True) as p:
            p.hdel(self._k.allowlist(tenant), entry_id)
            p.incr(self._k.allowlist_version(tenant))
            gone, _ = await p.execute()
        return bool(gone)

    async def candidates(self, tenant: str) -> tuple[list[Candidate], int]:
        return _candidates(await self._r.hgetall(self._k.allowlist_candidates(tenant)))

    async def candidate(self, tenant: str, cand_id: str) -> Candidate | None:
        raw: Any = await self._r.hget(self._k.allowlist_candidates(tenant), cand_id)
        if raw is None:
            return None
        return Candidate.model_validate_json(raw)

    async def confirm(self, candidate: Candidate, entry: AllowlistEntry) -> int:
        """The candidate becomes an entry (one MULTI: entry, version, candidate gone)."""
        async with self._r.pipeline(transaction=True) as p:
            p.hset(self._k.allowlist(entry.tenant), entry.entry_id, entry.model_dump_json())
            p.incr(self._k.allowlist_version(entry.tenant))
            p.hdel(self._k.allowlist_candidates(candidate.tenant), candidate.cand_id)
            _, version, _ = await p.execute()
        return int(version)

    async def reject(self, candidate: Candidate) -> None:
        """Kept, marked rejected: bridges do not propose it again."""
        marked = candidate.model_copy(update={"status": "rejected"})
        await self._r.hset(
            self._k.allowlist_candidates(candidate.tenant),
            candidate.cand_id,
            marked.model_dump_json(),
        )
