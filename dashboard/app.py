"""``create_app``: the dashboard's composition root (DESIGN §7).

The lifespan opens the Redis client and starts the live feed's reader and principal
watcher (both cancelled at a stop, whatever state they are in); the routes get
everything through ``app.state.ctx`` (``dashboard.deps.Context``). Every response
carries the security headers; every one but the static assets is ``no-store``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import redis
from argon2 import PasswordHasher
from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from dashboard import tenant_check
from dashboard.audit import AuditLog
from dashboard.auth import ApiKeyStore, Clock, RateLimiter, SessionStore, UserStore
from dashboard.cases import CallFacts, CaseStore
from dashboard.deps import Context, LoginRequiredError
from dashboard.evidence import EvidenceDesk
from dashboard.keys import DashKeys
from dashboard.live import LiveHub
from dashboard.oidc import LoginStates, OidcClient, OidcConfig
from dashboard.routes import (
    admin,
    alerts,
    allowlist,
    auth,
    calls,
    cases,
    enrolments,
    evidence,
    manage_pages,
    oidc,
    pages,
    policy,
    subjects,
    system,
    watchlist,
    watchlist_review,
    webhooks,
)
from dashboard.settings import DashboardSettings
from dashboard.store import DashboardStore
from detectors.bus.allowlist import AllowlistStore
from detectors.bus.biometrics_store import BiometricsStore
from detectors.bus.connect import async_client
from detectors.bus.erasure import SubjectEraser
from detectors.bus.evidence import EvidenceSettings, load_evidence_vault
from detectors.bus.keys import Keys
from detectors.bus.numbers import load_vault
from detectors.bus.policy_store import PolicyStore
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.admin import WebhookAdmin
from detectors.bus.webhooks.secrets import load_key

log = logging.getLogger(__name__)
_HERE = Path(__file__).resolve().parent
API_PREFIX = "/api/v1"
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; "
    "object-src 'none'"
)


def create_app(
    settings: DashboardSettings | None = None,
    bus: BusSettings | None = None,
    *,
    redis_url: str | None = None,
    clock: Clock = time.time,
    password_hasher: PasswordHasher | None = None,
    evidence_settings: EvidenceSettings | None = None,
) -> FastAPI:
    settings = settings or DashboardSettings()
    bus = bus or BusSettings()
    secret = settings.load_session_key(bus.state_dir)  # fail at start, not at first login
    numbers = load_vault(bus)  # the bridge's numbers key: masked display, audited reveal
    # the webhook secrets' key: only to create endpoints or rotate secrets; a configured
    # key that does not load fails the start, none configured leaves those two off
    configured = bus.webhook_key_file is not None or bus.webhook_key is not None
    webhook_key = load_key(bus) if configured else None
    keys = Keys(bus.key_prefix)
    dash = DashKeys(keys)
    # the bridge's evidence key: opens kept clips and embeddings (issue 11); never Redis
    evidence_settings = evidence_settings or EvidenceSettings()
    evidence_vault = load_evidence_vault(evidence_settings, bus.state_dir)
    oidc_config = OidcConfig.from_settings(settings)  # a wrong configuration fails the start

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = async_client(bus, redis_url)
        hub = LiveHub(client, keys, settings.live_queue)
        app.state.ctx = Context(
            settings=settings,
            clock=clock,
            store=DashboardStore(
                client, keys, clock, settings.alerts_scan, settings.scores_scan, numbers
            ),
            users=UserStore(client, dash, clock, password_hasher),
            api_keys=ApiKeyStore(client, dash, clock),
            sessions=SessionStore(
                client, dash, clock, secret, settings.session_idle_s, settings.session_max_s
            ),
            login_limit=RateLimiter(client, dash, settings.login_attempts, settings.login_window_s),
            live_limit=RateLimiter(client, dash, settings.live_connects, settings.login_window_s),
            audit=AuditLog(client, dash, clock, settings.audit_maxlen),
            hub=hub,
            origins=settings.origins(),
            biometrics=BiometricsStore(client, keys),
            policy=PolicyStore(client, keys),
            allowlist=AllowlistStore(client, keys),
            webhooks=WebhookAdmin(client, keys, webhook_key, bus.webhook_allow_private_targets),
            oidc=OidcClient(oidc_config) if oidc_config else None,
            oidc_states=LoginStates(client, dash),
            api_limit=RateLimiter(client, dash, settings.api_requests, settings.api_window_s)
            if settings.api_requests
            else None,
        )
        app.state.evidence = EvidenceDesk(
            client, dash, evidence_vault, evidence_settings.receipt_grace_s, clock
        )
        app.state.cases = CaseStore(client, dash)
        app.state.call_facts = CallFacts(client, dash, settings.scores_scan)
        app.state.eraser = SubjectEraser(client, keys)
        ctx = app.state.ctx
        with contextlib.suppress(redis.RedisError, OSError, ValueError):  # a warning only
            tenant_check.warn(
                await tenant_check.platform_wide_non_admins(ctx.users, ctx.api_keys, ctx.policy)
            )
        tasks = (
            asyncio.create_task(hub.run(), name="live-feed"),
            asyncio.create_task(hub.watch(settings.live_recheck_s), name="live-principals"),
        )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            # whatever either task ended with (cancelled, or an error logged here), the
            # client is closed: a stop never waits on, nor fails at, the live feed
            for ended in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(ended, Exception):
                    log.error("live feed task failed: %r", ended)
            await client.aclose()

    app = FastAPI(
        title="CallShield dashboard API",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: served ourselves instead
        redoc_url=None,
        openapi_url=None,
    )

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        headers = response.headers
        if not request.url.path.startswith("/static/"):
            headers["Cache-Control"] = "no-store"
        headers["Content-Security-Policy"] = _CSP
        headers["X-Content-Type-Options"] = "nosniff"
        headers["X-Frame-Options"] = "DENY"
        # same-origin, not no-referrer: under no-referrer Chromium sends ``Origin: null``
        # on form posts (the logout form), which the CSRF origin check must refuse;
        # other origins still get no referrer at all
        headers["Referrer-Policy"] = "same-origin"
        headers["Cross-Origin-Opener-Policy"] = "same-origin"
        return response

    @app.exception_handler(LoginRequiredError)
    async def to_login(request: Request, exc: LoginRequiredError) -> Response:
        return RedirectResponse("/login", status_code=303)

    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    app.include_router(system.health_router)
    app.include_router(pages.router)
    app.include_router(manage_pages.router)
    app.include_router(policy.pages)
    routers = (
        auth,
        oidc,
        alerts,
        calls,
        admin,
        system,
        watchlist,
        watchlist_review,
        webhooks,
        allowlist,
        policy,
        subjects,
        enrolments,
    )
    for module in routers:
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(evidence.router, prefix=API_PREFIX)
    app.include_router(cases.router, prefix=API_PREFIX)
    app.include_router(cases.pages)
    return app
