"""The alert queue and its triage (``/api/v1/alerts``, ``/api/v1/labels``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.deps import Analyst, Context, CtxDep, Viewer
from dashboard.schemas import AlertPublic, AssignIn, Comment, CommentIn, LabelIn
from dashboard.tenancy import assignable, narrow, sees
from detectors.alert_schema import Alert, Band

router = APIRouter(tags=["alerts"])


async def _alert(ctx: Context, alert_id: str, who: Principal) -> Alert:
    """The alert, or 404 (unknown, or of a tenant the principal does not see)."""
    return scoping.alert(who, await ctx.store.alert(alert_id))


async def _changed(ctx: Context, alert_id: str) -> AlertPublic:
    public = await ctx.store.public_alert(alert_id)
    assert public is not None
    ctx.hub.publish(
        {"type": "triage", "alert_id": alert_id, "triage": public.triage.model_dump()},
        tenant=public.tenant,
    )
    return public


@router.get("/alerts")
async def list_alerts(
    who: Viewer,
    ctx: CtxDep,
    status: Literal["new", "acknowledged"] | None = None,
    band: Band | None = None,
    call_id: str | None = None,
    tenant: Annotated[str | None, Query(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")] = None,
) -> list[AlertPublic]:
    """The alert queue, newest first (latest revision of each alert); only the
    principal's tenants', ``tenant`` narrowing it to one."""
    return await ctx.store.alerts(
        status=status, band=band, call_id=call_id, tenants=narrow(who.tenants, tenant)
    )


@router.get("/alerts/{alert_id}")
async def get_alert(alert_id: str, who: Viewer, ctx: CtxDep) -> AlertPublic:
    """One alert with its triage state."""
    await _alert(ctx, alert_id, who)
    public = await ctx.store.public_alert(alert_id)
    assert public is not None
    return public


@router.post("/alerts/{alert_id}/ack")
async def acknowledge(alert_id: str, who: Analyst, ctx: CtxDep) -> AlertPublic:
    """Acknowledge an alert (the first acknowledgement is kept)."""
    alert = await _alert(ctx, alert_id, who)
    await ctx.store.acknowledge(alert_id, who.name)
    await ctx.audit.record(who, "alert.ack", alert_id, tenant=alert.tenant)
    return await _changed(ctx, alert_id)


@router.post("/alerts/{alert_id}/assign")
async def assign(alert_id: str, body: AssignIn, who: Analyst, ctx: CtxDep) -> AlertPublic:
    """Assign an alert to a user who may see it (one of the alert's tenant, or
    platform-wide) and whom this principal may see."""
    alert = await _alert(ctx, alert_id, who)
    users = [u for u in await ctx.users.list() if assignable(u, who.tenants)]
    if body.assignee not in {u["username"] for u in users if sees(u, alert.tenant)}:
        raise HTTPException(422, "no such user")
    await ctx.store.assign(alert_id, body.assignee)
    await ctx.audit.record(
        who, "alert.assign", alert_id, assignee=body.assignee, tenant=alert.tenant
    )
    return await _changed(ctx, alert_id)


@router.get("/alerts/{alert_id}/comments")
async def list_comments(alert_id: str, who: Viewer, ctx: CtxDep) -> list[Comment]:
    """An alert's comments, oldest first."""
    await _alert(ctx, alert_id, who)
    return await ctx.store.comments(alert_id)


@router.post("/alerts/{alert_id}/comments", status_code=201)
async def add_comment(alert_id: str, body: CommentIn, who: Analyst, ctx: CtxDep) -> Comment:
    """Comment on an alert."""
    alert = await _alert(ctx, alert_id, who)
    comment = await ctx.store.comment(alert_id, who.name, body.text)
    await ctx.audit.record(
        who, "alert.comment", alert_id, chars=len(body.text), tenant=alert.tenant
    )
    return comment


@router.post("/alerts/{alert_id}/label")
async def label(alert_id: str, body: LabelIn, who: Analyst, ctx: CtxDep) -> AlertPublic:
    """Label an alert a true or false positive (stored for threshold calibration)."""
    alert = await _alert(ctx, alert_id, who)
    await ctx.store.label(alert, body.label, body.note, who.name)
    await ctx.audit.record(who, "alert.label", alert_id, label=body.label, tenant=alert.tenant)
    return await _changed(ctx, alert_id)


@router.get("/labels")
async def export_labels(who: Analyst, ctx: CtxDep) -> list[dict[str, Any]]:
    """Every label with the score, threshold and versions behind it (calibration and
    retraining export)."""
    return await ctx.store.labels(who.tenants)
