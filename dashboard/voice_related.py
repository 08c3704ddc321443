"""Related calls by the same voice: the call's kept speaker embedding (evidence, issue
11) against the kept embeddings of other recent calls (cosine, pure Python over a few
hundred floats; same tenant and speaker model only). Bounded: at most ``scan`` calls,
newest first, from the events stream; evidence that expired is simply not there, so the
retention window bounds it too. Nothing without this call's embedding; an embedding
that does not open (another key, a bad record) is skipped."""

from __future__ import annotations

import logging
import math
import sys
from array import array
from typing import Any

from starlette.requests import HTTPConnection

from dashboard.cases import CallFacts
from dashboard.evidence import EvidenceDesk
from dashboard.schemas import RelatedCall
from dashboard.tenancy import Tenants
from detectors.bus.evidence import EvidenceKind, EvidenceMeta

log = logging.getLogger(__name__)


async def related_calls(
    conn: HTTPConnection, call_id: str, tenants: Tenants = None
) -> list[RelatedCall]:
    """The call page's related calls: same ANI hash, watchlist entry or replayed audio
    (``CallFacts.related``), then the same voice by kept embedding; with ``tenants``,
    only calls of those tenants (a call of no known tenant is left out)."""
    facts: CallFacts = conn.app.state.call_facts
    desk: EvidenceDesk = conn.app.state.evidence
    settings = conn.app.state.ctx.settings
    found = await facts.related(call_id)
    shown = {r["call_id"] for r in found} | {call_id}
    recent = [c for c in reversed(await facts.calls()) if c not in shown]  # newest first
    threshold, scan = settings.related_voice_threshold, settings.related_voice_scan
    found += await same_voice(desk, call_id, recent, threshold, scan)
    if tenants is not None:
        store = conn.app.state.ctx.store
        found = [r for r in found if await store.call_tenant(r["call_id"]) in tenants]
    return [RelatedCall.model_validate(r) for r in found]


async def same_voice(
    desk: EvidenceDesk, call_id: str, others: list[str], threshold: float, scan: int
) -> list[dict[str, Any]]:
    """Calls of ``others`` (newest first) whose kept voice is ``threshold`` or closer."""
    mine = await _embedding(desk, call_id)
    if mine is None:
        return []
    meta, vec = mine
    out = []
    for other in [c for c in others if c != call_id][:scan]:
        found = await _embedding(desk, other)
        if found is None:
            continue
        theirs, v = found
        if (theirs.tenant, theirs.model, theirs.dim) != (meta.tenant, meta.model, meta.dim):
            continue
        score = cosine(vec, v)
        if score >= threshold:
            out.append(
                {
                    "call_id": other,
                    "link": "voiceprint",
                    "started_at": None,
                    "why": f"same voice (cosine {score:.2f}, {meta.model})",
                }
            )
    return out


def cosine(a: array[float], b: array[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norm if norm > 0 else 0.0


async def _embedding(desk: EvidenceDesk, call_id: str) -> tuple[EvidenceMeta, array[float]] | None:
    try:
        found = await desk.reader.record(call_id, "embedding")
        if found is None:
            return None
        meta, blob = found
        if meta.kind is not EvidenceKind.EMBEDDING or not meta.dim:
            return None
        raw = desk.open(meta, blob)
    except ValueError as exc:
        log.warning("call %s: kept embedding not usable (%s)", call_id, type(exc).__name__)
        return None
    if len(raw) != 4 * meta.dim:
        return None
    vec = array("f", raw)  # float32 little-endian
    if sys.byteorder == "big":
        vec.byteswap()
    return meta, vec
