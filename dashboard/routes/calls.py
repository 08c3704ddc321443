"""Live calls and call detail (``/api/v1/calls``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.deps import Analyst, Context, CtxDep, Viewer
from dashboard.masking import mask_text
from dashboard.schemas import (
    CallDetail,
    CallFilters,
    CallPublic,
    CallRisk,
    RelatedCall,
    RevealedNumbers,
    RevealIn,
)
from dashboard.tenancy import narrow
from dashboard.voice_related import related_calls
from detectors.bus.biometrics import SUBJECT_PATTERN, CallUpdate, new_id

router = APIRouter(prefix="/calls", tags=["calls"])


@router.get("")
async def live_calls(
    who: Viewer, ctx: CtxDep, filters: Annotated[CallFilters, Query()]
) -> list[CallPublic]:
    """Live calls, riskiest first, with the band and the dimension behind it. Filters:
    ``band``; ``queue`` and ``agent`` (exact, as a mid-call claim ``PATCH`` set them);
    ``since``/``until`` (ISO 8601, a time zone or UTC) on the call's last event;
    ``tenant`` (within the principal's own tenants)."""
    tenants = narrow(who.tenants, filters.tenant)
    return await ctx.store.live_calls(**filters.store_args(), tenants=tenants)


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
    if risk is None or not who.sees(risk.tenant):
        raise HTTPException(404, "no call with that id (unknown, or its state expired)")
    return risk


class CallPatch(BaseModel):
    """A mid-call claim (issue 12): absent fields stay as they are."""

    model_config = ConfigDict(extra="forbid")

    claimed_account: str | None = Field(default=None, pattern=SUBJECT_PATTERN)
    consent_ref: str | None = Field(default=None, min_length=1, max_length=200)
    queue: str | None = Field(default=None, min_length=1, max_length=64)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)


async def _update(call_id: str, body: CallPatch, who: Principal, ctx: Context) -> dict[str, Any]:
    if await ctx.biometrics.live_call(call_id) is None:
        raise HTTPException(404, "no live call with that id")
    await scoping.call(ctx, who, call_id)
    try:
        update = CallUpdate(
            command_id=new_id("cu"),
            call_id=call_id,
            requested_by=who.name,
            at=datetime.fromtimestamp(ctx.clock(), UTC),
            **body.model_dump(),
        )
    except ValidationError as exc:
        raise HTTPException(422, exc.errors()[0].get("msg", "invalid update")) from None
    await ctx.biometrics.submit_update(update)
    fields = sorted(update.fields())
    await ctx.audit.record(who, "call.update", call_id, fields=fields, command=update.command_id)
    return {"call_id": call_id, "command_id": update.command_id, "fields": fields}


@router.patch("/by-external-id/{system}/{external_id}", status_code=202)
async def update_by_external_id(
    system: System, external_id: ExternalId, body: CallPatch, who: Analyst, ctx: CtxDep
) -> dict[str, Any]:
    """``PATCH /calls/{id}`` for a call named by the PBX's or CPaaS's own id."""
    call_id = await ctx.biometrics.call_by_external_id(system, external_id)
    if call_id is None:
        raise HTTPException(404, "no live call with that id")
    return await _update(call_id, body, who, ctx)


@router.patch("/{call_id}", status_code=202)
async def update_call(call_id: str, body: CallPatch, who: Analyst, ctx: CtxDep) -> dict[str, Any]:
    """Mid-call claim: the claimed account (voice_mismatch then scores the caller against
    its enrolment), consent reference, queue, agent. Accepted here, applied by the
    bridge that owns the call within about a second (202)."""
    return await _update(call_id, body, who, ctx)


@router.get("/{call_id}/risk")
async def risk(call_id: str, who: Viewer, ctx: CtxDep) -> CallRisk:
    """The risk of a call now: its highest band and each dimension's latest alert."""
    found = await ctx.store.call_risk(call_id)
    if found is None or not who.sees(found.tenant):
        raise HTTPException(404, "no such call")
    return found


@router.get("/{call_id}/related")
async def related(call_id: str, who: Viewer, ctx: CtxDep, request: Request) -> list[RelatedCall]:
    """Other recent calls with this call's ANI hash (never the number), a watchlist
    entry it matched or the same voice (``voiceprint``: the kept speaker embeddings'
    cosine), or the replay stage's match of their audio (``replay``); only calls of
    the principal's tenants."""
    await scoping.call(ctx, who, call_id)
    return await related_calls(request, call_id, who.tenants)


@router.get("/{call_id}")
async def call_detail(call_id: str, who: Viewer, ctx: CtxDep) -> CallDetail:
    """One call: its alerts and each dimension's score over time."""
    detail = await ctx.store.call_detail(call_id)
    if detail is None or not who.sees(detail.call.tenant):
        raise HTTPException(404, "no such call")
    return detail


@router.post("/{call_id}/reveal")
async def reveal(call_id: str, body: RevealIn, who: Analyst, ctx: CtxDep) -> RevealedNumbers:
    """The call's phone numbers unmasked: an audited action, with a reason."""
    await scoping.call(ctx, who, call_id)
    raw = await ctx.store.raw_numbers(call_id)
    if raw is None:
        raise HTTPException(404, "no such call")
    await ctx.audit.record(who, "call.reveal_numbers", call_id, reason=mask_text(body.reason))
    return RevealedNumbers(call_id=call_id, **raw)
