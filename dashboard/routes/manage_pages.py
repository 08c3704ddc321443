"""The management pages: the watchlist and customer enrolments (analysts: biometric
data, so not viewers; enrolments are removed or expired by admins) and the webhook
endpoints with their delivery health and dead letters (administrators).

They render what the REST routes return (the same functions, so the same checks,
expiry purge and masking); ``static/app.js`` sends the changes to those routes with the
page's CSRF token.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.deps import CtxDep, PageAdmin, PageAnalyst
from dashboard.routes import enrolments, watchlist, webhooks
from dashboard.routes.pages import render
from detectors.bus.biometrics import TENANT_PATTERN

router = APIRouter(include_in_schema=False)


def when(value: float | str | None) -> str:
    """Epoch seconds or an ISO time as ``YYYY-MM-DD HH:MM:SS`` UTC; ``—`` for none."""
    if value in (None, "", 0, 0.0):
        return "—"
    if isinstance(value, str):
        at = datetime.fromisoformat(value)
    else:
        at = datetime.fromtimestamp(float(value), UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _tenant(who: Principal, asked: str | None) -> str:
    """The tenant a page shows: the one asked for, else a single-tenant principal's
    own, else ``default``."""
    if asked is not None:
        return asked
    if who.tenants is not None and len(who.tenants) == 1:
        return next(iter(who.tenants))
    return "default"


@router.get("/watchlist")
async def watchlist_page(
    request: Request,
    who: PageAnalyst,
    ctx: CtxDep,
    tenant: Annotated[str | None, Query(pattern=TENANT_PATTERN)] = None,
) -> Response:
    listed = await watchlist.list_entries(who, ctx, _tenant(who, tenant))
    return render(
        request,
        "watchlist.html",
        who,
        listed=listed,
        when=when,
        page="watchlist",
        two_person=ctx.settings.watchlist_two_person,
    )


@router.get("/enrolments")
async def enrolments_page(
    request: Request,
    who: PageAnalyst,
    ctx: CtxDep,
    tenant: Annotated[str | None, Query(pattern=TENANT_PATTERN)] = None,
) -> Response:
    listed = await enrolments.listing(ctx, scoping.tenant(who, _tenant(who, tenant)))
    return render(request, "enrolments.html", who, listed=listed, when=when, page="enrolments")


@router.get("/webhooks")
async def webhooks_page(request: Request, who: PageAdmin, ctx: CtxDep) -> Response:
    listed = await webhooks.list_endpoints(who, ctx)
    dead = await webhooks.dead_letters(who, ctx, None, 200)
    return render(
        request, "webhooks.html", who, listed=listed, dead=dead, when=when, page="webhooks"
    )
