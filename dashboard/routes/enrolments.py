"""Customer enrolments listed per tenant (analysts; masked account ids, no voiceprints)
and, for admins, removed or expired by their page reference (audited with the masked
account id). Enrolling, and reading or removing one by account id, are the watchlist
routes' ``/enrolments/{subject}``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from dashboard import scoping
from dashboard.deps import Admin, Analyst, Context, CtxDep
from dashboard.enrolments import find, list_enrolments, mask_account, row
from detectors.bus.biometrics import TENANT_PATTERN

router = APIRouter(prefix="/enrolments", tags=["watchlist"])
TenantQ = Annotated[str, Query(pattern=TENANT_PATTERN)]
RefP = Annotated[str, Path(pattern=r"^en_[0-9a-f]{20}$")]
MAX_DAYS = 1098


class ExpireIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(default="default", pattern=TENANT_PATTERN)
    in_days: int = Field(default=0, ge=0, le=MAX_DAYS)  # 0: expired now


def _now(ctx: Context) -> datetime:
    return datetime.fromtimestamp(ctx.clock(), UTC)


async def listing(ctx: Context, tenant: str) -> dict[str, Any]:
    found, bad = await list_enrolments(ctx.store.redis, ctx.store.keys, tenant)
    now = _now(ctx)
    rows = [row(e, e.expired(now)) for e in found]
    return {"tenant": tenant, "enrolments": rows, "unreadable": bad}


@router.get("")
async def list_all(who: Analyst, ctx: CtxDep, tenant: TenantQ = "default") -> dict[str, Any]:
    """The tenant's enrolments: reference, masked account id, consent reference
    (masked), model, who added it, when, expiry; never the voiceprint."""
    scoping.tenant(who, tenant)
    return await listing(ctx, tenant)


@router.post("/by-ref/{ref}/expire")
async def expire(ref: RefP, body: ExpireIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Brings the expiry forward to ``in_days`` from now (0: now); never extends it
    (consent does not grow): 409 if the enrolment already expires sooner."""
    scoping.tenant(who, body.tenant)
    found = await find(ctx.store.redis, ctx.store.keys, body.tenant, ref)
    if found is None:
        raise HTTPException(404, "no such enrolment")
    at = _now(ctx) + timedelta(days=body.in_days)
    if found.expires_at is not None and found.expires_at <= at:
        raise HTTPException(409, "the enrolment already expires by then")
    await ctx.biometrics.put_enrolment(found.model_copy(update={"expires_at": at}))
    subject = mask_account(found.subject)
    await ctx.audit.record(
        who, "enrolment.expire", subject, tenant=body.tenant, expires_at=at.isoformat()
    )
    return row(found.model_copy(update={"expires_at": at}), body.in_days == 0)


@router.delete("/by-ref/{ref}")
async def remove(ref: RefP, who: Admin, ctx: CtxDep, tenant: TenantQ = "default") -> dict[str, Any]:
    scoping.tenant(who, tenant)
    found = await find(ctx.store.redis, ctx.store.keys, tenant, ref)
    if found is None or not await ctx.biometrics.remove_enrolment(tenant, found.subject):
        raise HTTPException(404, "no such enrolment")
    await ctx.audit.record(who, "enrolment.remove", mask_account(found.subject), tenant=tenant)
    return {"removed": ref}
