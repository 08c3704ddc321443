"""Dependencies every route declares: who is asking, may they, and is the request
really theirs (CSRF).

- Machines: ``Authorization: Bearer csk_…`` or ``X-API-Key``. Not cookie-based, so no
  CSRF token.
- People: the signed session cookie. Every unsafe method (POST, PUT, PATCH, DELETE) must
  carry the session's CSRF token (``X-CSRF-Token`` header, or a ``csrf_token`` form field)
  and, when the browser sends an ``Origin``, one from the allowlist; else 403.
- ``api(role)`` answers 401 to nobody; ``page(role)`` redirects nobody to the login page.
  Either answers 403 to a role below ``role``. ``api(role)`` also counts the principal's
  requests: 429 with ``Retry-After`` past the configured API rate limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.requests import HTTPConnection

from dashboard.audit import AuditLog
from dashboard.auth import (
    ApiKeyStore,
    Clock,
    Principal,
    RateLimiter,
    Role,
    SessionStore,
    UserStore,
    tokens_equal,
)
from dashboard.live import LiveHub, Recheck
from dashboard.oidc import LoginStates, OidcClient
from dashboard.settings import DashboardSettings
from dashboard.store import DashboardStore
from dashboard.tenancy import Tenants
from detectors.bus.allowlist import AllowlistStore
from detectors.bus.biometrics_store import BiometricsStore
from detectors.bus.policy_store import PolicyStore
from detectors.bus.webhooks.admin import WebhookAdmin

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
OIDC_USER_PREFIX = "oidc:"  # dashboard.oidc.username: never a local account's name


@dataclass
class Context:
    """Everything the routes use, built once by the app's lifespan."""

    settings: DashboardSettings
    clock: Clock
    store: DashboardStore
    users: UserStore
    api_keys: ApiKeyStore
    sessions: SessionStore
    login_limit: RateLimiter
    live_limit: RateLimiter
    audit: AuditLog
    hub: LiveHub
    origins: set[str]
    biometrics: BiometricsStore
    policy: PolicyStore
    allowlist: AllowlistStore
    webhooks: WebhookAdmin
    oidc: OidcClient | None
    oidc_states: LoginStates
    api_limit: RateLimiter | None = None  # per principal on /api/v1; None: no limit

    @property
    def cookie_name(self) -> str:
        # __Host-: the browser refuses it unless Secure, Path=/ and no Domain
        return "__Host-cs_session" if self.settings.cookie_secure else "cs_session"


class LoginRequiredError(Exception):
    """A page asked for by nobody: the app answers with a redirect to /login."""


def context(conn: HTTPConnection) -> Context:
    ctx: Context = conn.app.state.ctx
    return ctx


CtxDep = Annotated[Context, Depends(context)]


def client_address(conn: HTTPConnection) -> str:
    return conn.client.host if conn.client else "unknown"


def _api_key(conn: HTTPConnection) -> str | None:
    auth = conn.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else conn.headers.get("x-api-key")


async def authenticate(conn: HTTPConnection, ctx: Context) -> Principal | None:
    key = _api_key(conn)
    if key:
        return await ctx.api_keys.lookup(key)
    cookie = conn.cookies.get(ctx.cookie_name)
    if not cookie:
        return None
    session = await ctx.sessions.load(cookie)
    if session is None:
        return None
    tenants = session.tenants
    if not session.user.startswith(OIDC_USER_PREFIX):
        # a password session: the user's tenant set as it is now, not as at login, so
        # an admin's change applies to every live session at once (OIDC sessions keep
        # their login's claim: their user is not in the store)
        exists, tenants = await ctx.users.current(session.user)
        if not exists:
            await ctx.sessions.delete(session.sid)
            return None
    return Principal(session.user, session.role, "session", session.sid, session.csrf, tenants)


def recheck(conn: HTTPConnection, ctx: Context, who: Principal) -> Recheck | None:
    """How a long-lived connection (the live feed) re-reads ``who`` as it is now: an
    API key's record, a password session's user; None for an OIDC session (its
    tenants are its login's claim, and its user is not in the store)."""
    key = _api_key(conn)
    if who.kind == "api_key" and key:
        return partial(_key_now, ctx.api_keys, key)
    if who.kind == "session" and not who.name.startswith(OIDC_USER_PREFIX):
        return partial(ctx.users.current, who.name)
    return None


async def _key_now(keys: ApiKeyStore, key: str) -> tuple[bool, Tenants]:
    found = await keys.lookup(key)
    return (True, found.tenants) if found is not None else (False, None)


async def check_csrf(request: Request, ctx: Context, who: Principal) -> None:
    if request.method in SAFE_METHODS or who.kind != "session":
        return
    origin = request.headers.get("origin")
    if origin is not None and origin.rstrip("/") not in ctx.origins:
        raise HTTPException(403, "cross-origin request refused")
    token = request.headers.get(CSRF_HEADER, "")
    if not token and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        token = str((await request.form()).get(CSRF_FIELD, ""))
    if not tokens_equal(token, who.csrf):
        raise HTTPException(403, "missing or wrong CSRF token")


def _require(role: Role, page: bool) -> Callable[[Request, Context], Awaitable[Principal]]:
    async def dependency(request: Request, ctx: CtxDep) -> Principal:
        who = await authenticate(request, ctx)
        if who is None:
            if page:
                raise LoginRequiredError()
            raise HTTPException(401, "not authenticated", headers={"WWW-Authenticate": "Bearer"})
        if not page:
            await check_api_rate(ctx, who)
        if who.role < role:
            raise HTTPException(403, f"needs the {role.label} role")
        await check_csrf(request, ctx, who)
        return who

    return dependency


async def check_api_rate(ctx: Context, who: Principal) -> None:
    """429 with Retry-After past ``api_requests`` per ``api_window_s`` for this principal
    (an API key, or a person's session user: all their sessions together)."""
    if ctx.api_limit is None:
        return
    wait = await ctx.api_limit.retry_after("api", f"{who.kind}:{who.name}")
    if wait:
        raise HTTPException(
            429, f"API rate limit exceeded; retry in {wait} s", headers={"Retry-After": str(wait)}
        )


def api(role: Role) -> object:
    return Depends(_require(role, page=False))


def page(role: Role) -> object:
    return Depends(_require(role, page=True))


Viewer = Annotated[Principal, api(Role.VIEWER)]
Analyst = Annotated[Principal, api(Role.ANALYST)]
Admin = Annotated[Principal, api(Role.ADMIN)]
PageViewer = Annotated[Principal, page(Role.VIEWER)]
PageAnalyst = Annotated[Principal, page(Role.ANALYST)]
PageAdmin = Annotated[Principal, page(Role.ADMIN)]
