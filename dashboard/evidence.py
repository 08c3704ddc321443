"""Evidence on the dashboard (issue 11): what a call kept, playback, legal hold, the
reviewer permission and the voiceprint behind enrolling a fraudster from a call.

Who may do what (``docs/dashboard.md``):
- list a call's evidence (times, sizes, expiry; never content): analysts and admins;
- play a clip: *reviewers*, an explicit permission on top of the analyst role, granted
  by an admin per user or API-key name (``dash:evidence:reviewers``), and admins. The
  role ladder (viewer < analyst < admin) is left as it is: reviewing recordings is a
  grant to named people, not a rank;
- legal hold (set, lift): admins. Held evidence loses its expiry; lifting the hold
  gives each record back its own expiry (gone at once if that has passed).
Every playback, hold, release and grant is audited by the routes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio
from starlette.requests import HTTPConnection

from dashboard.auth import Principal, Role
from dashboard.keys import DashKeys
from detectors.bus.biometrics import encode_embedding
from detectors.bus.evidence import EvidenceKind, EvidenceMeta, EvidenceVault, wav_bytes
from detectors.bus.evidence_store import EvidenceReader, Receipt


class EvidenceUnavailableError(Exception):
    """Why a call's evidence cannot be used; the routes answer 409 with it."""


@dataclass(frozen=True, slots=True)
class CallEvidence:
    call_id: str
    items: list[dict[str, Any]]  # present records' public meta, with ttl_s
    gone: list[dict[str, Any]]  # receipts of expired records
    hold: dict[str, Any] | None


class EvidenceDesk:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        dash: DashKeys,
        vault: EvidenceVault,
        receipt_grace_s: int,
        clock: Callable[[], float],
    ) -> None:
        self._r, self._dash, self._vault, self._clock = client, dash, vault, clock
        self.reader = EvidenceReader(client, dash.bus, receipt_grace_s)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    # ---- the reviewer permission ---------------------------------------------------
    async def may_review(self, who: Principal) -> bool:
        if who.role >= Role.ADMIN:
            return True
        if who.role < Role.ANALYST:
            return False
        found: Any = await self._r.hget(self._dash.evidence_reviewers, who.name)
        return found is not None

    async def reviewers(self) -> dict[str, Any]:
        raw: Any = await self._r.hgetall(self._dash.evidence_reviewers)
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    async def grant(self, name: str, by: str) -> None:
        body = json.dumps({"granted_by": by, "at": self._now().isoformat()})
        await self._r.hset(self._dash.evidence_reviewers, name, body)

    async def revoke(self, name: str) -> bool:
        return bool(await self._r.hdel(self._dash.evidence_reviewers, name))

    # ---- listing -------------------------------------------------------------------
    async def hold_of(self, call_id: str) -> dict[str, Any] | None:
        body: Any = await self._r.hget(self._dash.evidence_holds, call_id)
        return json.loads(body) if body is not None else None

    async def tenants(self, call_id: str) -> frozenset[str]:
        """The tenants the call's kept records name (each record is sealed with its
        tenant, so it is known after the call's state and alerts expired); none when
        no record is left (receipts name no tenant)."""
        return frozenset(h.meta.tenant for h in await self.reader.present(call_id))

    async def for_call(self, call_id: str) -> CallEvidence:
        present = await self.reader.present(call_id)
        hold = await self.hold_of(call_id)
        if hold is not None and any(h.ttl_s is not None for h in present):
            await self.reader.hold(call_id)  # a record written after the hold was set
            present = await self.reader.present(call_id)
        here = {h.meta.evidence_id for h in present}
        gone = [
            r.model_dump(mode="json")
            for r in await self.reader.receipts(call_id)
            if r.evidence_id not in here
        ]
        items = [h.meta.public() | {"ttl_s": h.ttl_s} for h in present]
        return CallEvidence(call_id, items, gone, hold)

    # ---- content -------------------------------------------------------------------
    async def _open(self, call_id: str, evidence_id: str) -> tuple[EvidenceMeta, bytes]:
        found = await self.reader.record(call_id, evidence_id)
        if found is None:
            raise EvidenceUnavailableError(await self._why_missing(call_id, evidence_id))
        meta, blob = found
        return meta, self._vault.open(meta, blob)  # ValueError: another key

    def open(self, meta: EvidenceMeta, blob: bytes) -> bytes:
        """A record's content (ValueError: sealed under another key, or altered)."""
        return self._vault.open(meta, blob)

    async def clip_wav(self, call_id: str, alert_id: str) -> tuple[EvidenceMeta, bytes]:
        meta, pcm = await self._open(call_id, f"clip:{alert_id}")
        return meta, wav_bytes(pcm, meta.sample_rate)

    async def voiceprint(self, call_id: str, tenant: str) -> dict[str, Any]:
        """The call's stored embedding as a watchlist voiceprint (``VoiceprintIn``)."""
        meta, raw = await self._open(call_id, "embedding")
        if meta.kind is not EvidenceKind.EMBEDDING or not meta.model or not meta.dim:
            raise EvidenceUnavailableError("the call's stored embedding names no speaker model")
        if meta.tenant != tenant:
            raise EvidenceUnavailableError(f"the call belongs to tenant {meta.tenant!r}")
        return {
            "model": meta.model,
            "dim": meta.dim,
            "embedding": encode_embedding(raw),
            "net_speech_s": meta.net_speech_s,
            "source": f"call:{call_id}",
        }

    async def _why_missing(self, call_id: str, evidence_id: str) -> str:
        receipts: list[Receipt] = await self.reader.receipts(call_id)
        mine = next((r for r in receipts if r.evidence_id == evidence_id), None)
        what = "audio clip" if evidence_id.startswith("clip:") else "speaker embedding"
        if mine is not None:
            return (
                f"the call's {what} expired at {mine.expires_at.isoformat()} (evidence "
                f"retention; kept since {mine.created_at.isoformat()}, not on legal hold)"
            )
        return (
            f"no {what} was kept for this call: evidence retention is off for its tenant, "
            "the call raised no alert, it had no external-leg speech, or its record "
            "expired long ago"
        )

    # ---- legal hold ----------------------------------------------------------------
    async def hold(self, call_id: str, by: str, reason: str) -> int:
        """Set the hold (records of the call lose their expiry); how many records."""
        body = json.dumps({"by": by, "at": self._now().isoformat(), "reason": reason})
        await self._r.hset(self._dash.evidence_holds, call_id, body)
        return await self.reader.hold(call_id)

    async def release(self, call_id: str) -> bool:
        if not await self._r.hdel(self._dash.evidence_holds, call_id):
            return False
        await self.reader.release(call_id)
        return True


async def evidence_view(
    conn: HTTPConnection, call_id: str, who: Principal
) -> dict[str, Any] | None:
    """What the call page shows under its score timeline (None for viewers)."""
    desk: EvidenceDesk | None = getattr(conn.app.state, "evidence", None)
    if desk is None or who.role < Role.ANALYST:
        return None
    found = await desk.for_call(call_id)
    return {
        "records": found.items,
        "expired": found.gone,
        "hold": found.hold,
        "may_play": await desk.may_review(who),
    }
