"""Users, API keys and the audit log (``/api/v1``; admin only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from dashboard.auth import Role
from dashboard.deps import Admin, CtxDep
from dashboard.schemas import ApiKeyCreated, ApiKeyIn, UserIn

router = APIRouter(tags=["admin"])


@router.get("/users")
async def list_users(who: Admin, ctx: CtxDep) -> list[dict[str, Any]]:
    """Every user and role."""
    return await ctx.users.list()


@router.post("/users", status_code=201)
async def create_user(body: UserIn, who: Admin, ctx: CtxDep) -> dict[str, str]:
    """Create a user."""
    try:
        await ctx.users.create(body.username, body.password, Role.parse(body.role))
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    await ctx.audit.record(who, "user.create", body.username, role=body.role)
    return {"username": body.username, "role": body.role}


@router.get("/api-keys")
async def list_api_keys(who: Admin, ctx: CtxDep) -> list[dict[str, Any]]:
    """Every API key (ids, names and roles; never the keys)."""
    return await ctx.api_keys.list()


@router.post("/api-keys", status_code=201)
async def create_api_key(body: ApiKeyIn, who: Admin, ctx: CtxDep) -> ApiKeyCreated:
    """Create an API key for a machine; the key is in this response only."""
    try:
        key_id, key = await ctx.api_keys.create(body.name, Role.parse(body.role))
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    await ctx.audit.record(who, "api_key.create", key_id, name=body.name, role=body.role)
    return ApiKeyCreated(id=key_id, key=key)


@router.delete("/api-keys/{key_id}")
async def revoke_api_key(key_id: str, who: Admin, ctx: CtxDep) -> dict[str, bool]:
    """Revoke an API key."""
    if not await ctx.api_keys.revoke(key_id):
        raise HTTPException(404, "no such API key")
    await ctx.audit.record(who, "api_key.revoke", key_id)
    return {"ok": True}


@router.get("/audit")
async def audit_log(who: Admin, ctx: CtxDep, count: int = 200) -> list[dict[str, Any]]:
    """The newest audit entries."""
    return await ctx.audit.recent(max(1, min(count, 5000)))
