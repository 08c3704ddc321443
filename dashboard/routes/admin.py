"""Users, API keys and the audit log (``/api/v1``; admin only).

Tenants: a principal created without ``tenants`` is platform-wide, which only a
platform-wide admin may create; a tenant-scoped admin creates, lists, re-scopes and
revokes only principals inside its own tenants, and reads only its tenants' audit
entries. Re-scoping (``PUT .../tenants``) follows the creation rules; the user's live
sessions re-read their tenants on every request, so it applies at once, and the user's
or key's live-feed sockets are closed (they reconnect, re-scoped): on this process at
once, on the others within ``live_recheck_s``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, ConfigDict, Field

from dashboard import scoping
from dashboard.auth import Principal, Role
from dashboard.deps import Admin, CtxDep
from dashboard.schemas import ApiKeyCreated, ApiKeyIn, UserIn
from dashboard.tenancy import Tenants, assignable, dump_tenants, parse_tenants


def _tenants(who: Principal, values: list[str] | None) -> Tenants:
    """The new principal's checked tenant set (422 if malformed), within the creator's."""
    try:
        tenants = parse_tenants(values)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    scoping.grant(who, tenants)
    return tenants


router = APIRouter(tags=["admin"])


class TenantsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # None or empty: platform-wide (only a platform-wide admin may set that)
    tenants: list[str] | None = Field(max_length=64)


UserName = Annotated[str, Path(pattern=r"^[A-Za-z0-9._@-]{1,64}$")]
KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{1,32}$")]


@router.get("/users")
async def list_users(who: Admin, ctx: CtxDep) -> list[dict[str, Any]]:
    """Every user, role and tenant set (a scoped admin: the users inside its tenants)."""
    return [u for u in await ctx.users.list() if assignable(u, who.tenants)]


@router.post("/users", status_code=201)
async def create_user(body: UserIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Create a user; ``tenants`` limits them to those tenants (none: platform-wide)."""
    tenants = _tenants(who, body.tenants)
    try:
        await ctx.users.create(body.username, body.password, Role.parse(body.role), tenants)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    await ctx.audit.record(
        who, "user.create", body.username, role=body.role, tenants=dump_tenants(tenants)
    )
    return {"username": body.username, "role": body.role, "tenants": dump_tenants(tenants)}


@router.put("/users/{username}/tenants")
async def set_user_tenants(
    username: UserName, body: TenantsIn, who: Admin, ctx: CtxDep
) -> dict[str, Any]:
    """Replace a user's tenant set (as at creation: within the admin's own tenants;
    platform-wide only by a platform-wide admin). Applies to the user's live sessions
    at their next request; audited with the old set."""
    tenants = _tenants(who, body.tenants)
    found = await ctx.users.set_tenants(username, tenants, within=who.tenants)
    if found is None:
        raise HTTPException(404, "no such user")
    role, old = found
    ctx.hub.drop(username)
    await ctx.audit.record(
        who, "user.tenants", username, tenants=dump_tenants(tenants), before=dump_tenants(old)
    )
    return {"username": username, "role": role, "tenants": dump_tenants(tenants)}


@router.get("/api-keys")
async def list_api_keys(who: Admin, ctx: CtxDep) -> list[dict[str, Any]]:
    """Every API key (ids, names, roles and tenants; never the keys); a scoped admin:
    the keys inside its tenants."""
    return [k for k in await ctx.api_keys.list() if assignable(k, who.tenants)]


@router.post("/api-keys", status_code=201)
async def create_api_key(body: ApiKeyIn, who: Admin, ctx: CtxDep) -> ApiKeyCreated:
    """Create an API key for a machine; the key is in this response only. ``tenants``
    limits it to those tenants (none: platform-wide)."""
    tenants = _tenants(who, body.tenants)
    try:
        key_id, key = await ctx.api_keys.create(body.name, Role.parse(body.role), tenants)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    await ctx.audit.record(
        who, "api_key.create", key_id, name=body.name, role=body.role, tenants=dump_tenants(tenants)
    )
    return ApiKeyCreated(id=key_id, key=key)


@router.put("/api-keys/{key_id}/tenants")
async def set_api_key_tenants(
    key_id: KeyId, body: TenantsIn, who: Admin, ctx: CtxDep
) -> dict[str, Any]:
    """Replace an API key's tenant set (the same rules as for users); applies at the
    key's next request; audited with the old set."""
    tenants = _tenants(who, body.tenants)
    found = await ctx.api_keys.set_tenants(key_id, tenants, within=who.tenants)
    if found is None:
        raise HTTPException(404, "no such API key")
    name, role, old = found
    ctx.hub.drop(f"key:{name}")
    await ctx.audit.record(
        who,
        "api_key.tenants",
        key_id,
        name=name,
        tenants=dump_tenants(tenants),
        before=dump_tenants(old),
    )
    return {"id": key_id, "name": name, "role": role, "tenants": dump_tenants(tenants)}


@router.delete("/api-keys/{key_id}")
async def revoke_api_key(key_id: str, who: Admin, ctx: CtxDep) -> dict[str, bool]:
    """Revoke an API key."""
    if not await ctx.api_keys.revoke(key_id, within=who.tenants):
        raise HTTPException(404, "no such API key")
    await ctx.audit.record(who, "api_key.revoke", key_id)
    return {"ok": True}


@router.get("/audit")
async def audit_log(who: Admin, ctx: CtxDep, count: int = 200) -> list[dict[str, Any]]:
    """The newest audit entries."""
    return await ctx.audit.recent(max(1, min(count, 5000)), who.tenants)
