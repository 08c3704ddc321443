"""Webhook endpoints (``/api/v1/webhooks``): the endpoints with their delivery health,
add, enable/disable, rotate the secret, delete, the dead letters and their replay.

Admin only: an endpoint receives every alert it subscribes to (callers' external ids
included), so creating or pointing one is an administrator's act, and every change is
audited. An endpoint's ``tenants`` filter limits it to those tenants' alerts. A
tenant-scoped admin sees and manages only endpoints filtered to within its own tenants
(its new ones are filtered to its tenants when it names none) and their dead letters;
another endpoint is 404; only a platform-wide admin may point one at a private address.
A secret is in the response that creates it (or rotates it) only; the stored
ones are encrypted with the dispatcher's key, which this process needs only to create
or rotate (503 without it). The records, checks and the replay are the dispatcher's own
(``detectors.bus.webhooks.admin``).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.deps import Admin, Context, CtxDep
from dashboard.masking import mask_text
from dashboard.tenancy import label
from detectors.bus.biometrics import TENANT_PATTERN
from detectors.bus.webhooks.admin import EndpointHealth, NoKeyError, public
from detectors.bus.webhooks.payload import EVENT_TYPES
from detectors.bus.webhooks.store import Endpoint

router = APIRouter(prefix="/webhooks", tags=["webhooks"])

EndpointId = Annotated[str, Path(pattern=r"^ep_[0-9a-f]{16}$")]
EventId = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


class EndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=8, max_length=2000)
    event_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=16
    )
    allow_private: bool = False
    # only these tenants' alerts (no system events then); empty: every tenant's
    tenants: list[Annotated[str, Field(pattern=TENANT_PATTERN)]] = Field(
        default_factory=list, max_length=64
    )


class DisableIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="disabled by an administrator", min_length=1, max_length=200)


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    overlap_hours: float = Field(default=24.0, ge=0.0, le=24.0 * 30)


async def _own(ctx: Context, who: Principal, endpoint_id: str) -> str:
    """The endpoint's tenant label for the audit log; 404 unless the principal may
    manage it (platform-wide, or the endpoint is filtered to within its tenants)."""
    endpoint = await ctx.webhooks.get(endpoint_id)
    if who.tenants is None:
        return label(frozenset(endpoint.tenants) or None) if endpoint else "*"
    if endpoint is None or not _inside(endpoint, who):
        raise HTTPException(404, "no such endpoint")
    return label(frozenset(endpoint.tenants))


def _inside(endpoint: Endpoint, who: Principal) -> bool:
    return who.tenants is None or (bool(endpoint.tenants) and set(endpoint.tenants) <= who.tenants)


def _host(url: str) -> str:
    """What the audit log keeps of a URL: scheme and host (a path or query may hold a
    token the receiver issued)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}"


@router.get("")
async def list_endpoints(who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Every endpoint (no secrets) with its delivery health: queues waiting, parked
    (disabled) and dead-lettered, recent successes and failures, the newest attempt."""
    health = await ctx.webhooks.health()
    endpoints = []
    for ep in await ctx.webhooks.endpoints():
        if not _inside(ep, who):
            continue
        found = health.get(ep.id, EndpointHealth())
        endpoints.append({**public(ep), "health": found.public()})
    return {
        "endpoints": endpoints,
        "event_types": list(EVENT_TYPES),
        "can_create": ctx.webhooks.can_create,
        "allow_private_targets": ctx.webhooks.allow_private_targets,
    }


@router.post("", status_code=201)
async def add_endpoint(body: EndpointIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Add an endpoint (the URL is checked against SSRF); its signing secret is in this
    response only."""
    tenants = tuple(body.tenants)
    if who.tenants is not None:
        if body.allow_private:
            scoping.platform(who)
        for name in tenants:
            scoping.tenant(who, name)
        tenants = tenants or tuple(sorted(who.tenants))
    try:
        endpoint, secret = await ctx.webhooks.add(
            body.url, tuple(body.event_types), body.allow_private, tenants
        )
    except NoKeyError as exc:
        raise HTTPException(503, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    await ctx.audit.record(
        who,
        "webhook.add",
        endpoint.id,
        host=_host(endpoint.url),
        event_types=list(endpoint.event_types),
        allow_private=endpoint.allow_private,
        tenants=list(endpoint.tenants),
        tenant=label(frozenset(endpoint.tenants) or None),
    )
    return {"endpoint": public(endpoint), "secret": secret}


@router.post("/{endpoint_id}/enable")
async def enable(endpoint_id: EndpointId, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Enable an endpoint; the deliveries parked while it was disabled resume."""
    tenant = await _own(ctx, who, endpoint_id)
    endpoint = await ctx.webhooks.set_enabled(endpoint_id, True, "")
    if endpoint is None:
        raise HTTPException(404, "no such endpoint")
    await ctx.audit.record(who, "webhook.enable", endpoint_id, tenant=tenant)
    return public(endpoint)


@router.post("/{endpoint_id}/disable")
async def disable(
    endpoint_id: EndpointId, who: Admin, ctx: CtxDep, body: DisableIn | None = None
) -> dict[str, Any]:
    """Disable an endpoint: deliveries already queued for it are parked (they resume
    when it is enabled); events that arrive while it is disabled are not queued for it."""
    tenant = await _own(ctx, who, endpoint_id)
    reason = (body or DisableIn()).reason
    endpoint = await ctx.webhooks.set_enabled(endpoint_id, False, reason)
    if endpoint is None:
        raise HTTPException(404, "no such endpoint")
    await ctx.audit.record(
        who, "webhook.disable", endpoint_id, reason=mask_text(reason), tenant=tenant
    )
    return public(endpoint)


@router.post("/{endpoint_id}/rotate")
async def rotate(
    endpoint_id: EndpointId, who: Admin, ctx: CtxDep, body: RotateIn | None = None
) -> dict[str, Any]:
    """A new signing secret (in this response only); the previous one also signs for
    the overlap, so the receiver can switch without losing a delivery."""
    tenant = await _own(ctx, who, endpoint_id)
    overlap_h = (body or RotateIn()).overlap_hours
    try:
        secret = await ctx.webhooks.rotate(endpoint_id, overlap_h * 3600.0)
    except NoKeyError as exc:
        raise HTTPException(503, str(exc)) from None
    if secret is None:
        raise HTTPException(404, "no such endpoint")
    await ctx.audit.record(
        who, "webhook.rotate", endpoint_id, overlap_hours=overlap_h, tenant=tenant
    )
    return {"endpoint_id": endpoint_id, "secret": secret}


@router.delete("/{endpoint_id}")
async def delete(endpoint_id: EndpointId, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Delete an endpoint; what is still queued for it is dead-lettered at its next try."""
    tenant = await _own(ctx, who, endpoint_id)
    if not await ctx.webhooks.delete(endpoint_id):
        raise HTTPException(404, "no such endpoint")
    await ctx.audit.record(who, "webhook.delete", endpoint_id, tenant=tenant)
    return {"removed": endpoint_id}


@router.get("/dead")
async def dead_letters(
    who: Admin,
    ctx: CtxDep,
    endpoint: Annotated[str | None, Query(pattern=r"^ep_[0-9a-f]{16}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[dict[str, Any]]:
    """Dead-lettered deliveries, newest first (never their payload); a scoped admin:
    its endpoints' only."""
    found = await ctx.webhooks.dead_letters(endpoint, limit)
    if who.tenants is not None:
        mine = {ep.id for ep in await ctx.webhooks.endpoints() if _inside(ep, who)}
        found = [d for d in found if d.get("endpoint") in mine]
    for d in found:
        d["call_key"] = mask_text(d["call_key"])
        d["last_error"] = mask_text(d["last_error"])
    return found


@router.post("/{endpoint_id}/deliveries/{event_id}/replay", status_code=202)
async def replay(
    endpoint_id: EndpointId, event_id: EventId, who: Admin, ctx: CtxDep
) -> dict[str, Any]:
    """Deliver a dead-lettered (or delivered) event again, in its call's order."""
    tenant = await _own(ctx, who, endpoint_id)
    result = await ctx.webhooks.replay(endpoint_id, event_id)
    if result == 0:
        raise HTTPException(404, "no such delivery")
    if result < 0:
        raise HTTPException(409, "that delivery is still pending")
    await ctx.audit.record(who, "webhook.replay", endpoint_id, event_id=event_id, tenant=tenant)
    return {"queued": True, "endpoint_id": endpoint_id, "event_id": event_id}
