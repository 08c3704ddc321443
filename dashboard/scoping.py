"""The routes' tenant checks (``dashboard.tenancy`` says what a tenant set is).

An object of a tenant the principal does not see answers 404, exactly as an unknown
one does: a tenant-scoped principal learns nothing of other tenants' calls, alerts or
entries, not even that they exist. Acts that span every tenant (webhooks, subject
erasure, evidence reviewers, the what-if replay, cases, nodes) need a platform-wide
principal: 403.
"""

from __future__ import annotations

from fastapi import HTTPException

from dashboard.auth import Principal
from dashboard.deps import Context
from dashboard.evidence import EvidenceDesk
from dashboard.schemas import Health
from dashboard.tenancy import Tenants, inside
from detectors.alert_schema import Alert, SystemEvent


def tenant(who: Principal, name: str) -> str:
    """``name`` when the principal sees that tenant, else 404."""
    if not who.sees(name):
        raise HTTPException(404, "no such tenant")
    return name


async def call(ctx: Context, who: Principal, call_id: str) -> None:
    """404 unless the principal sees the call's tenant (a call of no known tenant is
    seen only platform-wide)."""
    if who.tenants is None:
        return
    found = await ctx.store.call_tenant(call_id)
    if found is None or found not in who.tenants:
        raise HTTPException(404, "no such call")


async def evidence(ctx: Context, desk: EvidenceDesk, who: Principal, call_id: str) -> None:
    """404 unless the principal sees the tenant of the call's evidence: the tenant its
    kept records name (each sealed with it), else the call's (its state or alerts), so
    evidence outlives the call's state for its own tenant's reviewers. Records naming a
    tenant the principal does not see, or none readable at all: 404 (platform-wide
    principals excepted)."""
    if who.tenants is None:
        return
    named = await desk.tenants(call_id)
    if named:
        if not named <= who.tenants:
            raise HTTPException(404, "no such call")
        return
    await call(ctx, who, call_id)


async def coverage(ctx: Context, who: Principal) -> list[SystemEvent]:
    """The coverage banner's events. A node serves every tenant, so its id and its
    call counts (every tenant's traffic) are a platform-wide principal's; a scoped one
    is told which dimensions are below objective, once each, with no node named."""
    found = await ctx.store.coverage_degraded()
    if who.tenants is None:
        return found
    by_dimension = {e.coverage.dimension: e for e in found if e.coverage is not None}
    return [
        e.model_copy(update={"node_id": ""})
        for _, e in sorted(by_dimension.items(), key=lambda kv: kv[0].value)
    ]


def alert(who: Principal, found: Alert | None) -> Alert:
    if found is None or not who.sees(found.tenant):
        raise HTTPException(404, "no such alert")
    return found


async def health(ctx: Context, who: Principal, found: Health) -> Health:
    """System health as a scoped principal may read it: Redis reachable and its own
    tenants' live calls; the streams' and nodes' figures (every tenant's traffic) are
    left out."""
    if who.tenants is None:
        return found
    own = len(await ctx.store.live_calls(tenants=who.tenants)) if found.redis_ok else 0
    return found.model_copy(
        update={"streams": {}, "nodes": [], "live_calls": own, "live_feed_behind": None}
    )


def platform(who: Principal) -> None:
    """403 unless platform-wide."""
    if who.tenants is not None:
        raise HTTPException(403, "needs a platform-wide principal (this one is tenant-scoped)")


def grant(who: Principal, tenants: Tenants) -> None:
    """A principal may create another only within its own tenants: a platform-wide one
    only a platform-wide admin may create."""
    if not inside(tenants, who.tenants):
        raise HTTPException(
            403, "a tenant-scoped admin may create principals only within its own tenants"
        )
