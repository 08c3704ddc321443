"""Logging in and out (``/api/v1/auth``), shared with the login page."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response

from dashboard.auth import Session
from dashboard.deps import Context, CtxDep, Viewer, client_address
from dashboard.schemas import LoginIn, Me
from dashboard.tenancy import dump_tenants

router = APIRouter(prefix="/auth", tags=["auth"])


async def log_in(
    ctx: Context, request: Request, username: str, password: str
) -> tuple[Session, str]:
    """A new session for a right password; 429 past the rate limit, 401 otherwise."""
    address = client_address(request)
    by_address = await ctx.login_limit.hit("login-ip", address)
    by_user = await ctx.login_limit.hit("login-user", username)
    if not (by_address and by_user):
        raise HTTPException(429, "too many login attempts; wait a minute")
    role = await ctx.users.verify(username, password)
    if role is None:
        raise HTTPException(401, "wrong username or password")
    await ctx.login_limit.reset("login-user", username)
    tenants = await ctx.users.tenants(username)
    session, cookie = await ctx.sessions.create(username, role, tenants)
    return session, cookie


def set_session_cookie(ctx: Context, response: Response, cookie: str) -> None:
    response.set_cookie(
        ctx.cookie_name,
        cookie,
        max_age=ctx.settings.session_max_s,
        path="/",
        secure=ctx.settings.cookie_secure,
        httponly=True,
        samesite="strict",
    )


@router.post("/login")
async def login(body: LoginIn, request: Request, response: Response, ctx: CtxDep) -> Me:
    """Log a person in (JSON body only, which a cross-site form cannot send): sets the
    session cookie and returns the CSRF token for unsafe requests."""
    session, cookie = await log_in(ctx, request, body.username, body.password)
    set_session_cookie(ctx, response, cookie)
    return Me(
        name=session.user,
        role=session.role.label,
        kind="session",
        csrf_token=session.csrf,
        tenants=dump_tenants(session.tenants),
    )


@router.post("/logout")
async def logout(who: Viewer, response: Response, ctx: CtxDep) -> dict[str, bool]:
    """End this session."""
    if who.sid:
        await ctx.sessions.delete(who.sid)
    response.delete_cookie(
        ctx.cookie_name,
        path="/",
        secure=ctx.settings.cookie_secure,
        httponly=True,
        samesite="strict",
    )
    return {"ok": True}


@router.get("/me")
async def me(who: Viewer) -> Me:
    """Who this session or API key is, and (for a session) its CSRF token."""
    return Me(
        name=who.name,
        role=who.role.label,
        kind=who.kind,
        csrf_token=who.csrf,
        tenants=dump_tenants(who.tenants),
    )
