"""The two-person rule for the watchlist (issue 11): an entry one analyst adds is
``pending`` (the bridges ignore it) until a different analyst approves it here, or
anyone with the analyst role rejects it (which deletes it). Approving needs a person
(a session, by password or single sign-on): an API key is a machine, and a machine
approving would make the second person the same script that added the entry. Both
actions are audited; ``DashboardSettings.watchlist_two_person`` turns the rule off
(entries are then active when added).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from dashboard import scoping
from dashboard.deps import Analyst, CtxDep
from dashboard.masking import mask_text
from detectors.bus.biometrics import TENANT_PATTERN

router = APIRouter(tags=["watchlist"])

EntryP = Annotated[str, Path(pattern=r"^wl_[0-9a-f]{16}$")]
TenantQ = Annotated[str, Query(pattern=TENANT_PATTERN)]


class RejectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=500)


@router.post("/watchlist/{entry_id}/approve")
async def approve_entry(
    entry_id: EntryP, who: Analyst, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    """The second analyst's approval: the entry becomes active and the bridges load it."""
    scoping.tenant(who, tenant)
    if await ctx.biometrics.entry(tenant, entry_id) is None:
        raise HTTPException(404, "no such entry")
    if who.kind != "session":
        raise HTTPException(403, "approving a watchlist entry needs a person, not an API key")
    at = datetime.fromtimestamp(ctx.clock(), UTC)
    try:
        entry = await ctx.biometrics.approve_entry(tenant, entry_id, who.name, at)
    except LookupError:
        raise HTTPException(404, "no such entry") from None
    except ValueError as exc:
        status = 403 if "cannot approve" in str(exc) else 409
        await ctx.audit.record(who, "watchlist.approve_refused", entry_id, reason=str(exc))
        raise HTTPException(status, str(exc)) from None
    await ctx.audit.record(
        who, "watchlist.approve", entry_id, tenant=tenant, added_by=entry.added_by
    )
    return entry.public()


@router.post("/watchlist/{entry_id}/reject")
async def reject_entry(
    entry_id: EntryP,
    who: Analyst,
    ctx: CtxDep,
    body: RejectIn | None = None,
    tenant: TenantQ = "default",
) -> dict[str, Any]:
    """Refuse a pending entry: it is deleted (an active one is removed, not rejected)."""
    scoping.tenant(who, tenant)
    entry = await ctx.biometrics.entry(tenant, entry_id)
    if entry is None:
        raise HTTPException(404, "no such entry")
    if entry.active:
        raise HTTPException(409, "the entry is active: remove it instead")
    await ctx.biometrics.remove_entries(tenant, [entry_id])
    reason = mask_text(body.reason) if body else ""
    await ctx.audit.record(
        who, "watchlist.reject", entry_id, tenant=tenant, added_by=entry.added_by, reason=reason
    )
    return {"rejected": entry_id, "version": await ctx.biometrics.version(tenant)}
