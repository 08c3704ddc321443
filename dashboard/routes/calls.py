"""Live calls and call detail (``/api/v1/calls``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path

from dashboard.deps import Analyst, CtxDep, Viewer
from dashboard.masking import mask_text
from dashboard.schemas import CallDetail, CallPublic, CallRisk, RevealedNumbers, RevealIn
from detectors.alert_schema import Band

router = APIRouter(prefix="/calls", tags=["calls"])


@router.get("")
async def live_calls(who: Viewer, ctx: CtxDep, band: Band | None = None) -> list[CallPublic]:
    """Live calls, riskiest first, with the band and the dimension behind it."""
    return await ctx.store.live_calls(band=band)


System = Annotated[
    str,
    Path(
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,31}$",
        description="whose id: asterisk, freeswitch, twilio, genesys, connect, sip-call-id, ...",
    ),
]
ExternalId = Annotated[str, Path(min_length=1, max_length=256)]


@router.get("/by-external-id/{system}/{external_id}/risk")
async def risk_by_external_id(
    system: System, external_id: ExternalId, who: Viewer, ctx: CtxDep
) -> CallRisk:
    """The risk of a call named by the PBX's or CPaaS's own id, from live state: for an
    IVR deciding mid-call, or an agent desktop showing the call it is on."""
    call_id = await ctx.store.call_by_external_id(system, external_id)
    risk = await ctx.store.call_risk(call_id) if call_id else None
    if risk is None:
        raise HTTPException(404, "no call with that id (unknown, or its state expired)")
    return risk


@router.get("/{call_id}/risk")
async def risk(call_id: str, who: Viewer, ctx: CtxDep) -> CallRisk:
    """The risk of a call now: its highest band and each dimension's latest alert."""
    found = await ctx.store.call_risk(call_id)
    if found is None:
        raise HTTPException(404, "no such call")
    return found


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
