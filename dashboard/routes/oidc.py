"""Login through the OpenID Connect provider (``/api/v1/auth/oidc``; ``dashboard.oidc``).

``GET /login`` starts one: a pending login in Redis under a fresh ``state`` and a
browser-binding cookie (SameSite=Lax: the provider's redirect back is a cross-site
navigation, which a Strict cookie would not survive), then a redirect to the provider
with the PKCE challenge and the nonce. ``GET /callback`` finishes it: the state read
once, the binding cookie matched, the code exchanged, the ID token verified, the role
mapped from the configured claim, and a session created as for a password login.

The callback answers with a page that moves on to ``/`` itself rather than a redirect:
the session cookie is SameSite=Strict, and a browser does not send it on a redirect
chain that began at the provider's site. Every login and every refusal is audited.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from dashboard.deps import Context, CtxDep, client_address
from dashboard.oidc import LoginStates, map_role, map_tenants, username
from dashboard.oidc_tokens import OidcError
from dashboard.routes.auth import set_session_cookie
from dashboard.tenancy import label

log = logging.getLogger(__name__)
router = APIRouter(prefix="/auth/oidc", tags=["auth"], include_in_schema=False)

_CONTINUE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta http-equiv="refresh" content="0;url=/"><title>Logged in</title></head>'
    '<body><p>Logged in. <a href="/">Continue</a></p></body></html>'
)


def binding_cookie(ctx: Context) -> str:
    return "__Host-cs_oidc" if ctx.settings.cookie_secure else "cs_oidc"


def _refused(ctx: Context, message: str) -> Response:
    response = RedirectResponse(f"/login?error={quote(message[:100])}", status_code=303)
    response.delete_cookie(binding_cookie(ctx), path="/", secure=ctx.settings.cookie_secure)
    return response


@router.get("/login")
async def oidc_login(request: Request, ctx: CtxDep) -> Response:
    """Start a login at the identity provider."""
    if ctx.oidc is None:
        return _refused(ctx, "Single sign-on is not configured.")
    if not await ctx.live_limit.hit("oidc-start", client_address(request)):
        return _refused(ctx, "Too many attempts; wait a minute.")
    cookie = secrets.token_urlsafe(32)
    state, pending = await ctx.oidc_states.begin(cookie)
    try:
        url = await ctx.oidc.authorization_url(state, pending.nonce, pending.verifier)
    except OidcError as exc:
        log.warning("oidc login not started: %s", exc)
        return _refused(ctx, "The identity provider is not available.")
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        binding_cookie(ctx),
        cookie,
        max_age=600,
        path="/",
        secure=ctx.settings.cookie_secure,
        httponly=True,
        samesite="lax",
    )
    return response


Param = Annotated[str, Query(max_length=4096)]


@router.get("/callback")
async def oidc_callback(
    request: Request,
    ctx: CtxDep,
    code: Param = "",
    state: Param = "",
    error: Param = "",
) -> Response:
    """The provider's redirect back: check everything, then open a session."""
    if ctx.oidc is None:
        return _refused(ctx, "Single sign-on is not configured.")
    pending = await ctx.oidc_states.finish(state)
    cookie = request.cookies.get(binding_cookie(ctx), "")
    why = ""
    if pending is None:
        why = "unknown or used state"
    elif not cookie or not secrets.compare_digest(LoginStates.binding_of(cookie), pending.binding):
        why = "callback from another browser than the one that started the login"
    elif error:
        why = f"provider answered {error[:60]}"
    elif not code:
        why = "no authorization code"
    if why or pending is None:
        return await _refuse(ctx, request, why, "")
    try:
        claims = await ctx.oidc.exchange(code, pending.verifier, pending.nonce, ctx.clock())
    except OidcError as exc:
        return await _refuse(ctx, request, str(exc), "")
    cfg = ctx.oidc.config
    name = username(claims, cfg.username_claim)
    role = map_role(claims, cfg.role_claim, cfg.role_map)
    if role is None:
        return await _refuse(ctx, request, f"no {cfg.role_claim} value maps to a role", name)
    tenants, why = map_tenants(claims, cfg.tenant_claim)
    if why:
        return await _refuse(ctx, request, why, name)
    _, session_cookie = await ctx.sessions.create(name, role, tenants)
    await ctx.audit.record_as(
        name,
        role.label,
        "oidc",
        "auth.login",
        name,
        audit_tenant=label(tenants),
        issuer=cfg.issuer,
        sub_sha256=hashlib.sha256(str(claims["sub"]).encode()).hexdigest()[:32],
        address=client_address(request),
    )
    response = HTMLResponse(_CONTINUE)
    set_session_cookie(ctx, response, session_cookie)
    response.delete_cookie(binding_cookie(ctx), path="/", secure=ctx.settings.cookie_secure)
    return response


async def _refuse(ctx: Context, request: Request, why: str, name: str) -> Response:
    log.warning("oidc login refused: %s", why)
    await ctx.audit.record_as(
        name or "unknown",
        "none",
        "oidc",
        "auth.login_refused",
        name or "unknown",
        reason=why,
        address=client_address(request),
    )
    return _refused(ctx, "Single sign-on refused: " + why)
