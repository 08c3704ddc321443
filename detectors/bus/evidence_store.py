"""Evidence records in Redis (``detectors.bus.keys``: ``evidence:{<call>}`` and
``evidence:{<call>}:<id>``): the bridge writes, the dashboard reads and holds.

- ``write_evidence`` (the bridge, synchronous, off the media threads): one script sets
  the record (``meta`` JSON, ``blob`` ciphertext) with its expiry and adds a receipt to
  the call's index; a new index gets an expiry ``receipt_grace_s`` past the record's, an
  existing one only a later one (``EXPIREAT ... GT``: an index on legal hold has no
  expiry and keeps none).
- ``EvidenceReader`` (the dashboard, asyncio): a call's receipts and the records still
  there, one record's ciphertext, and legal hold: ``PERSIST`` on the call's records and
  index (held evidence never expires), and back to each record's own expiry when the
  hold is lifted (``EXPIREAT`` in the past deletes at once). Under ``callshield
  redis-acl`` the dashboard may read ``evidence:*`` and run only PERSIST and EXPIREAT on
  it: it cannot write or forge a record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis
import redis.asyncio
from pydantic import BaseModel, ConfigDict

from detectors.bus.evidence import EvidenceKind, EvidenceMeta
from detectors.bus.keys import Keys

log = logging.getLogger(__name__)

_WRITE = """
local fresh = redis.call('EXISTS', KEYS[2]) == 0
redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'blob', ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
if fresh then
  redis.call('EXPIREAT', KEYS[2], ARGV[6])
else
  redis.call('EXPIREAT', KEYS[2], ARGV[6], 'GT')
end
return 1
"""


class Receipt(BaseModel):
    """What the call's index says of one record (no content): enough to say why it is
    gone once it expired."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evidence_id: str
    kind: EvidenceKind
    alert_id: str | None = None
    created_at: datetime
    expires_at: datetime


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _epoch(t: datetime) -> int:
    return int(t.timestamp())


class EvidenceWriter:
    """The bridge's side: ``write`` one sealed record (the script loads once)."""

    def __init__(self, client: redis.Redis, keys: Keys, receipt_grace_s: int) -> None:
        self._r, self._k, self._grace = client, keys, receipt_grace_s
        self._script = client.register_script(_WRITE)

    def write(self, meta: EvidenceMeta, blob: bytes) -> None:
        receipt = Receipt(
            evidence_id=meta.evidence_id,
            kind=meta.kind,
            alert_id=meta.alert_id,
            created_at=meta.created_at,
            expires_at=meta.expires_at,
        )
        index_until = meta.expires_at + timedelta(seconds=self._grace)
        self._script(
            keys=[
                self._k.evidence(meta.call_id, meta.evidence_id),
                self._k.evidence_index(meta.call_id),
            ],
            args=[
                meta.model_dump_json(),
                blob,
                _epoch(meta.expires_at),
                meta.evidence_id,
                receipt.model_dump_json(),
                _epoch(index_until),
            ],
        )


@dataclass(frozen=True, slots=True)
class Held:
    """A record as the dashboard sees it: its meta, and its TTL (None: no expiry)."""

    meta: EvidenceMeta
    ttl_s: int | None


class EvidenceReader:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, receipt_grace_s: int) -> None:
        self._r, self._k, self._grace = client, keys, receipt_grace_s

    async def receipts(self, call_id: str) -> list[Receipt]:
        raw: Any = await self._r.hgetall(self._k.evidence_index(call_id))
        out = []
        for field, body in raw.items():
            try:
                out.append(Receipt.model_validate_json(body))
            except ValueError:
                log.warning("evidence receipt %s of call %s does not parse", _s(field), call_id)
        return sorted(out, key=lambda r: (r.created_at, r.evidence_id))

    async def record(self, call_id: str, evidence_id: str) -> tuple[EvidenceMeta, bytes] | None:
        """(meta, ciphertext), or None when it expired or never existed."""
        raw: Any = await self._r.hmget(self._k.evidence(call_id, evidence_id), ["meta", "blob"])
        if raw[0] is None or raw[1] is None:
            return None
        meta = EvidenceMeta.model_validate_json(raw[0])
        if meta.call_id != call_id or meta.evidence_id != evidence_id:
            raise ValueError("evidence record is stored under another call or id")
        return meta, bytes(raw[1])

    async def present(self, call_id: str) -> list[Held]:
        """The call's records still stored, with their TTLs."""
        out = []
        for receipt in await self.receipts(call_id):
            key = self._k.evidence(call_id, receipt.evidence_id)
            async with self._r.pipeline(transaction=False) as p:
                p.hget(key, "meta")
                p.ttl(key)
                body, ttl = await p.execute()
            if body is None:
                continue
            try:
                meta = EvidenceMeta.model_validate_json(body)
            except ValueError:
                log.warning("evidence %s of call %s does not parse", receipt.evidence_id, call_id)
                continue
            out.append(Held(meta, None if int(ttl) < 0 else int(ttl)))
        return out

    async def hold(self, call_id: str) -> int:
        """Legal hold: the call's records and index lose their expiry. How many records."""
        receipts = await self.receipts(call_id)
        async with self._r.pipeline(transaction=True) as p:
            p.persist(self._k.evidence_index(call_id))
            for r in receipts:
                p.persist(self._k.evidence(call_id, r.evidence_id))
            await p.execute()
        return len([h for h in await self.present(call_id)])

    async def release(self, call_id: str) -> None:
        """Lift the hold: each record back to its own expiry (deleted now if past)."""
        receipts = await self.receipts(call_id)
        if not receipts:
            return
        until = max(r.expires_at for r in receipts) + timedelta(seconds=self._grace)
        async with self._r.pipeline(transaction=True) as p:
            for r in receipts:
                p.expireat(self._k.evidence(call_id, r.evidence_id), _epoch(r.expires_at))
            p.expireat(self._k.evidence_index(call_id), _epoch(until))
            await p.execute()
