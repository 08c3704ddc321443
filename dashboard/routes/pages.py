"""The HTML pages: server-rendered (Jinja2), with ``static/app.js`` for the live feed
and the triage buttons (which call the REST API with the page's CSRF token)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from dashboard import chart, scoping, tenant_check
from dashboard.auth import Principal, Role
from dashboard.deps import CtxDep, PageAdmin, PageViewer
from dashboard.evidence import evidence_view
from dashboard.routes.auth import log_in, set_session_cookie
from dashboard.schemas import CallFilters
from dashboard.tenancy import assignable, narrow
from dashboard.voice_related import related_calls
from detectors.alert_schema import Band

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")
LOGIN_CSRF_COOKIE = "cs_login_csrf"


def render(
    request: Request, name: str, who: Principal | None, code: int = 200, **values: Any
) -> HTMLResponse:
    values.update(who=who, csrf=who.csrf if who else "")
    values.setdefault("sso", request.app.state.ctx.oidc is not None)
    return templates.TemplateResponse(request, name, values, status_code=code)


@router.get("/login")
async def login_page(request: Request, ctx: CtxDep, error: str = "") -> Response:
    token = secrets.token_urlsafe(24)
    response = render(request, "login.html", None, error=error[:100], login_csrf=token)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        max_age=600,
        path="/login",
        secure=ctx.settings.cookie_secure,
        httponly=True,
        samesite="strict",
    )
    return response


@router.post("/login")
async def login_form(
    request: Request,
    ctx: CtxDep,
    username: str = Form(max_length=64),
    password: str = Form(max_length=1024),
    csrf_token: str = Form(""),
) -> Response:
    """The login form; a double-submit token (cookie + field) stops login CSRF."""
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not cookie or not secrets.compare_digest(cookie, csrf_token):
        raise HTTPException(403, "missing or wrong CSRF token")
    try:
        _, session_cookie = await log_in(ctx, request, username, password)
    except HTTPException as exc:
        status = exc.status_code
        token = secrets.token_urlsafe(24)
        message = (
            "Too many attempts; wait a minute." if status == 429 else "Wrong username or password."
        )
        response: Response = render(
            request, "login.html", None, status, error=message, login_csrf=token
        )
        response.set_cookie(
            LOGIN_CSRF_COOKIE,
            token,
            max_age=600,
            path="/login",
            secure=ctx.settings.cookie_secure,
            httponly=True,
            samesite="strict",
        )
        return response
    response = RedirectResponse("/", status_code=303)
    set_session_cookie(ctx, response, session_cookie)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout_form(who: PageViewer, ctx: CtxDep) -> Response:
    if who.sid:
        await ctx.sessions.delete(who.sid)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(
        ctx.cookie_name, path="/", secure=ctx.settings.cookie_secure, httponly=True
    )
    return response


@router.get("/")
async def calls_page(
    request: Request, who: PageViewer, ctx: CtxDep, filters: Annotated[CallFilters, Query()]
) -> Response:
    tenants = narrow(who.tenants, filters.tenant)
    calls = await ctx.store.live_calls(**filters.store_args(), tenants=tenants)
    return render(
        request,
        "calls.html",
        who,
        calls=calls,
        band=filters.band,
        filters=filters,
        page="calls",
        coverage_degraded=await scoping.coverage(ctx, who),
    )


@router.get("/alerts")
async def alerts_page(
    request: Request,
    who: PageViewer,
    ctx: CtxDep,
    status: str | None = None,
    band: Band | None = None,
    tenant: Annotated[str | None, Query(pattern=r"^([a-z0-9][a-z0-9_-]{0,31})?$")] = None,
) -> Response:
    status = status if status in ("new", "acknowledged") else None
    tenant = tenant or None
    alerts = await ctx.store.alerts(status=status, band=band, tenants=narrow(who.tenants, tenant))
    users = [u["username"] for u in await ctx.users.list() if assignable(u, who.tenants)]
    return render(
        request,
        "alerts.html",
        who,
        alerts=alerts,
        users=users,
        status=status,
        band=band,
        tenant=tenant,
        page="alerts",
        coverage_degraded=await scoping.coverage(ctx, who),
    )


@router.get("/calls/{call_id}")
async def call_page(request: Request, call_id: str, who: PageViewer, ctx: CtxDep) -> Response:
    detail = await ctx.store.call_detail(call_id)
    if detail is None or not who.sees(detail.call.tenant):
        return render(request, "error.html", who, 404, message="No such call.")
    threshold = max((a.threshold for a in detail.alerts), default=None)
    comments = {a.alert_id: await ctx.store.comments(a.alert_id) for a in detail.alerts}
    return render(
        request,
        "call.html",
        who,
        detail=detail,
        chart=chart.build(detail.timeline, threshold),
        comments=comments,
        evidence=await evidence_view(request, call_id, who),
        related=await related_calls(request, call_id, who.tenants),
        two_person=ctx.settings.watchlist_two_person,
        page="calls",
    )


@router.get("/system")
async def system_page(request: Request, who: PageViewer, ctx: CtxDep) -> Response:
    found = await scoping.health(ctx, who, await ctx.store.health())
    exposed: list[str] = []  # the misconfiguration, for platform-wide admins only
    if who.role >= Role.ADMIN and who.tenants is None and found.redis_ok:
        wide = await tenant_check.platform_wide_non_admins(ctx.users, ctx.api_keys, ctx.policy)
        exposed = [tenant_check.describe(p) for p in wide]
    return render(
        request,
        "system.html",
        who,
        health=found,
        platform_wide=exposed,
        clients=ctx.hub.count(who.tenants),
        page="system",
        coverage_degraded=await scoping.coverage(ctx, who),
    )


@router.get("/audit")
async def audit_page(request: Request, who: PageAdmin, ctx: CtxDep) -> Response:
    return render(
        request, "audit.html", who, entries=await ctx.audit.recent(200, who.tenants), page="audit"
    )


@router.get("/api/v1/docs")
async def api_docs(request: Request, who: PageViewer) -> Response:
    """The API reference, rendered from the OpenAPI document (no Swagger UI download)."""
    spec = request.app.openapi()
    ops = [
        {
            "method": method.upper(),
            "path": path,
            "summary": op.get("summary", ""),
            "doc": op.get("description", ""),
        }
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    ]
    return render(request, "docs.html", who, ops=ops, page="docs")
