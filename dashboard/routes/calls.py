"""Live calls and call detail (``/api/v1/calls``)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from dashboard.deps import Analyst, CtxDep, Viewer
from dashboard.masking import mask_text
from dashboard.schemas import CallDetail, CallPublic, RevealedNumbers, RevealIn
from detectors.alert_schema import Band

router = APIRouter(prefix="/calls", tags=["calls"])


@router.get("")
async def live_calls(who: Viewer, ctx: CtxDep, band: Band | None = None) -> list[CallPublic]:
    """Live calls, riskiest first, with the band and the dimension behind it."""
    return await ctx.store.live_calls(band=band)


@router.get("/{call_id}")
async def call_detail(call_id: str, who: Viewer, ctx: CtxDep) -> CallDetail:
    """One call: its alerts and each dimension's score over time."""
    detail = await ctx.store.call_detail(call_id)
    if detail is None:
        raise HTTPException(404, "no such call")
    return detail


@router.post("/{call_id}/reveal")
async def reveal(call_id: str, body: RevealIn, who: Analyst, ctx: CtxDep) -> RevealedNumbers:
    """The call's phone numbers unmasked: an audited action, with a reason."""
    raw = await ctx.store.raw_numbers(call_id)
    if raw is None:
        raise HTTPException(404, "no such call")
    await ctx.audit.record(who, "call.reveal_numbers", call_id, reason=mask_text(body.reason))
    return RevealedNumbers(call_id=call_id, **raw)
