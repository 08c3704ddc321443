"""The alert policy (``/api/v1/policy``): analysts read it, admins change it (audited
with the policy before and after) after a what-if over the stored scores of the last
days; bridges pick a change up within a second (``detectors.bus.policy_watch``).
A small admin page (``/policy``) does the same with forms.

Bad input is refused with 422 and a reason (``detectors.bus.policy`` validates: scopes,
N-of-M, thresholds, early media); an edit based on an older version is refused with 409.

Tenants: a tenant-scoped principal reads the policy with only its tenants' sections
(``tenants``; the platform defaults it runs under stay visible) and, as an admin,
changes only those: its edit's ``tenants`` replace its own sections, other tenants'
sections are kept as stored, a section of another tenant is 404 and a change to the
platform-wide rules 403. The what-if replays every tenant's scores: platform-wide only.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.deps import Admin, Analyst, Context, CtxDep, PageAdmin
from dashboard.tenancy import label
from detectors.bus.calibration import Dataset, Unlabelled
from detectors.bus.calibration_load import load_async
from detectors.bus.policy import Policy, PolicyBody
from detectors.bus.policy_sim import evaluate
from detectors.bus.policy_store import PolicyConflictError

router = APIRouter(tags=["policy"])
pages = APIRouter(include_in_schema=False)
MAX_WHATIF_SCORES = 1_000_000


class PolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyBody
    base_version: str | None = Field(default=None, max_length=40)


class WhatIfIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyBody
    days: int = Field(default=30, ge=1, le=90)
    unlabelled: Unlabelled = "exclude"


async def _current(ctx: Context) -> Policy:
    try:
        return await ctx.policy.current()
    except ValueError as exc:
        raise HTTPException(409, f"the stored policy is unusable: {exc}") from None


def _visible(policy: PolicyBody, who: Principal) -> dict[str, Any]:
    """The policy as this principal may read it (its tenants' sections only)."""
    data = policy.model_dump(mode="json")
    if who.tenants is not None:
        data["tenants"] = {t: v for t, v in data["tenants"].items() if t in who.tenants}
    return data


def _scoped(who: Principal, before: Policy, body: PolicyIn) -> PolicyIn:
    """A tenant-scoped admin's edit merged into the stored policy: only its sections."""
    if who.tenants is None:
        return body
    for name in body.policy.tenants:
        scoping.tenant(who, name)
    mine = body.policy.model_dump(exclude={"tenants"})
    if mine != before.body().model_dump(exclude={"tenants"}):
        raise HTTPException(
            403, "a tenant-scoped admin changes only its tenants' sections (tenants.<name>)"
        )
    kept = {t: v for t, v in before.tenants.items() if t not in who.tenants}
    merged = before.body().model_copy(update={"tenants": {**kept, **body.policy.tenants}})
    return body.model_copy(update={"policy": PolicyBody.model_validate(merged.model_dump())})


async def _apply(ctx: Context, who: Principal, body: PolicyIn) -> Policy:
    before = await _current(ctx)
    body = _scoped(who, before, body)
    try:
        after = await ctx.policy.apply(body.policy, body.base_version)
    except PolicyConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    scope = {} if who.tenants is None else {"tenant": label(who.tenants)}
    await ctx.audit.record(
        who,
        "policy.update",
        after.version,
        before_version=before.version,
        before=_visible(before.body(), who),
        after=_visible(body.policy, who),
        **scope,
    )
    return after


async def _what_if(ctx: Context, body: WhatIfIn) -> dict[str, Any]:
    current = await _current(ctx)
    data: Dataset = await load_async(
        ctx.policy.client,
        ctx.store.keys,
        body.days * 86400.0,
        body.unlabelled,
        MAX_WHATIF_SCORES,
    )
    genuine, fraud = list(data.genuine.values()), list(data.fraud.values())
    return {
        "days": body.days,
        "data": data.counts(),
        "current": {"version": current.version}
        | evaluate(current.body(), genuine, fraud).as_dict(),
        "proposed": {"content_hash": body.policy.content_hash()}
        | evaluate(body.policy, genuine, fraud).as_dict(),
    }


@router.get("/policy")
async def get_policy(who: Analyst, ctx: CtxDep) -> dict[str, Any]:
    """The policy bridges run (the built-in one while none is stored); a tenant-scoped
    principal sees its tenants' sections only."""
    current = await _current(ctx)
    return _visible(current, who) | {"version": current.version}


@router.put("/policy")
async def put_policy(body: PolicyIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Store a new policy: the next version; bridges swap it in within a second.
    ``base_version``: the version the edit started from (409 if it moved). A
    tenant-scoped admin changes only its tenants' sections."""
    after = await _apply(ctx, who, body)
    return _visible(after, who) | {"version": after.version}


@router.post("/policy/what-if")
async def what_if(body: WhatIfIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """The current and the proposed policy replayed over the last ``days`` of stored
    scores: false alerts per 1,000 genuine calls and hits on labelled fraud
    (platform-wide admins: it reads every tenant's scores)."""
    scoping.platform(who)
    return await _what_if(ctx, body)


# ---- the admin page -------------------------------------------------------------------


def _page(
    request: Request, ctx: Context, who: Principal, current: Policy, code: int = 200, **extra: Any
) -> Response:
    from dashboard.routes.pages import render

    text = extra.pop("text", None) or json.dumps(
        _visible(current.body(), who), indent=2, sort_keys=True
    )
    return render(
        request, "policy.html", who, code, page="policy", current=current, text=text, **extra
    )


def _parse(text: str) -> PolicyBody:
    try:
        return PolicyBody.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'policy'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(problems[:2000]) from None


PolicyText = Annotated[str, Form(max_length=200_000)]


@pages.get("/policy")
async def policy_page(request: Request, who: PageAdmin, ctx: CtxDep) -> Response:
    return _page(request, ctx, who, await _current(ctx))


@pages.post("/policy/what-if")
async def policy_what_if_form(
    request: Request,
    who: PageAdmin,
    ctx: CtxDep,
    policy: PolicyText,
    days: Annotated[int, Form(ge=1, le=90)] = 30,
) -> Response:
    current = await _current(ctx)
    try:
        body = _parse(policy)
    except ValueError as exc:
        return _page(request, ctx, who, current, 422, text=policy, error=str(exc))
    if who.tenants is not None:
        error = "the what-if reads every tenant's scores: platform-wide admins only"
        return _page(request, ctx, who, current, 403, text=policy, error=error)
    result = await _what_if(ctx, WhatIfIn(policy=body, days=days))
    return _page(request, ctx, who, current, text=policy, result=result)


@pages.post("/policy")
async def policy_apply_form(
    request: Request,
    who: PageAdmin,
    ctx: CtxDep,
    policy: PolicyText,
    base_version: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    current = await _current(ctx)
    try:
        body = _parse(policy)
        await _apply(ctx, who, PolicyIn(policy=body, base_version=base_version or None))
    except ValueError as exc:
        return _page(request, ctx, who, current, 422, text=policy, error=str(exc))
    except HTTPException as exc:
        return _page(request, ctx, who, current, exc.status_code, text=policy, error=exc.detail)
    return RedirectResponse("/policy", status_code=303)
