"""Fraud cases (``/api/v1/cases``, pages ``/cases``; ``dashboard.cases``): analysts
create cases, link calls (checked for ``ani`` and ``voiceprint`` links), set the
disposition and loss amount, and export them as CSV or JSON. Every change is audited;
viewers may read."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection

from dashboard import scoping
from dashboard.auth import Principal
from dashboard.case_export import to_csv, to_json
from dashboard.cases import (
    CallFacts,
    Case,
    CaseConflictError,
    CaseStore,
    Disposition,
    LinkKind,
    check_link,
    new_case_id,
)
from dashboard.deps import Analyst, Context, CtxDep, PageViewer, Viewer
from dashboard.masking import mask_text
from dashboard.routes.evidence import DeskDep
from dashboard.routes.pages import render

router = APIRouter(prefix="/cases", tags=["cases"])
pages = APIRouter(include_in_schema=False)

CaseId = Annotated[str, Path(pattern=r"^case_[0-9a-f]{16}$")]
CallId = Annotated[str, Path(min_length=1, max_length=256)]


def case_store(conn: HTTPConnection) -> CaseStore:
    store: CaseStore = conn.app.state.cases
    return store


def call_facts(conn: HTTPConnection) -> CallFacts:
    facts: CallFacts = conn.app.state.call_facts
    return facts


StoreDep = Annotated[CaseStore, Depends(case_store)]
FactsDep = Annotated[CallFacts, Depends(call_facts)]


class LinkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=256)
    link: LinkKind = LinkKind.MANUAL
    note: str = Field(default="", max_length=500)


class CaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=200)
    tenant: str = Field(default="default", pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    calls: list[LinkIn] = Field(default_factory=list, max_length=100)


class CasePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1)  # the version the edit started from (409 if it moved)
    title: str | None = Field(default=None, min_length=1, max_length=200)
    disposition: Disposition | None = None
    loss_amount: Decimal | None = Field(default=None, ge=0, max_digits=14, decimal_places=2)
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")


def _now() -> datetime:
    return datetime.now(UTC)


async def _get(store: CaseStore, case_id: str, who: Principal) -> Case:
    """The case, or 404 (unknown, or of a tenant the principal does not see)."""
    case = await store.get(case_id)
    if case is None or not who.sees(case.tenant):
        raise HTTPException(404, "no such case")
    return case


async def _link(ctx: Context, case: Case, body: LinkIn, facts: CallFacts, who: Principal) -> Case:
    """A tenant-scoped principal links only calls of its tenants (404 otherwise)."""
    await scoping.call(ctx, who, body.call_id)
    tenant = await ctx.store.call_tenant(body.call_id)
    if tenant is not None and tenant != case.tenant:
        raise HTTPException(409, f"the call is of another tenant than the case ({case.tenant})")
    if case.call(body.call_id) is not None:
        raise HTTPException(409, "the call is already in the case")
    call = await facts.call(body.call_id, body.link, mask_text(body.note), who.name)
    if call is None:
        raise HTTPException(404, f"call {body.call_id} is unknown to the bus (or expired)")
    why = check_link(case, call)
    if why:
        raise HTTPException(409, why)
    return case.model_copy(update={"calls": (*case.calls, call)})


async def _save(store: CaseStore, case: Case, base: int) -> None:
    try:
        await store.put(case, base)
    except CaseConflictError as exc:
        raise HTTPException(409, str(exc)) from None


@router.get("")
async def list_cases(who: Viewer, store: StoreDep) -> list[dict[str, Any]]:
    return [
        c.model_dump(mode="json", exclude={"calls"}) | {"calls": len(c.calls)}
        for c in await store.list()
        if who.sees(c.tenant)
    ]


@router.post("", status_code=201)
async def create_case(
    body: CaseIn, who: Analyst, ctx: CtxDep, store: StoreDep, facts: FactsDep
) -> dict[str, Any]:
    scoping.tenant(who, body.tenant)
    now = _now()
    case = Case(
        case_id=new_case_id(),
        version=1,
        title=body.title,
        tenant=body.tenant,
        created_by=who.name,
        created_at=now,
        updated_by=who.name,
        updated_at=now,
    )
    for link in body.calls:
        case = await _link(ctx, case, link, facts, who)
    await _save(store, case, 0)
    await ctx.audit.record(
        who, "case.create", case.case_id, calls=[c.call_id for c in case.calls], tenant=case.tenant
    )
    return case.model_dump(mode="json")


@router.get("/{case_id}")
async def get_case(case_id: CaseId, who: Viewer, store: StoreDep) -> dict[str, Any]:
    return (await _get(store, case_id, who)).model_dump(mode="json")


@router.post("/{case_id}/calls")
async def link_call(
    case_id: CaseId, body: LinkIn, who: Analyst, ctx: CtxDep, store: StoreDep, facts: FactsDep
) -> dict[str, Any]:
    """Link a call: ``ani`` needs the call's ANI hash to equal one in the case,
    ``voiceprint`` the same matched watchlist entry; 409 with the reason otherwise."""
    case = await _get(store, case_id, who)
    linked = await _link(ctx, case, body, facts, who)
    linked = linked.model_copy(
        update={"version": case.version + 1, "updated_by": who.name, "updated_at": _now()}
    )
    await _save(store, linked, case.version)
    await ctx.audit.record(
        who, "case.link", case_id, call_id=body.call_id, link=body.link.value, tenant=case.tenant
    )
    return linked.model_dump(mode="json")


@router.delete("/{case_id}/calls/{call_id}")
async def unlink_call(
    case_id: CaseId, call_id: CallId, who: Analyst, ctx: CtxDep, store: StoreDep
) -> dict[str, Any]:
    case = await _get(store, case_id, who)
    if case.call(call_id) is None:
        raise HTTPException(404, "the call is not in the case")
    changed = case.model_copy(
        update={
            "calls": tuple(c for c in case.calls if c.call_id != call_id),
            "version": case.version + 1,
            "updated_by": who.name,
            "updated_at": _now(),
        }
    )
    await _save(store, changed, case.version)
    await ctx.audit.record(who, "case.unlink", case_id, call_id=call_id, tenant=case.tenant)
    return changed.model_dump(mode="json")


@router.patch("/{case_id}")
async def update_case(
    case_id: CaseId, body: CasePatch, who: Analyst, ctx: CtxDep, store: StoreDep
) -> dict[str, Any]:
    """Title, disposition, loss amount and currency."""
    case = await _get(store, case_id, who)
    if body.version != case.version:
        raise HTTPException(409, f"the case is at version {case.version}: reload and retry")
    fields = body.model_dump(exclude_unset=True, exclude={"version"})
    changed = Case.model_validate(
        case.model_dump()
        | fields
        | {"version": case.version + 1, "updated_by": who.name, "updated_at": _now()}
    )
    await _save(store, changed, case.version)
    await ctx.audit.record(
        who, "case.update", case_id, **{k: str(v) for k, v in fields.items()}, tenant=case.tenant
    )
    return changed.model_dump(mode="json")


@router.get("/{case_id}/suggestions")
async def suggestions(
    case_id: CaseId, who: Analyst, ctx: CtxDep, store: StoreDep, facts: FactsDep
) -> list[dict[str, Any]]:
    """Recent calls that share an ANI hash or a matched voiceprint with the case, and
    calls with replay alerts (of the principal's tenants)."""
    found = await facts.suggest(await _get(store, case_id, who))
    if who.tenants is None:
        return found
    return [s for s in found if await ctx.store.call_tenant(str(s["call_id"])) in who.tenants]


@router.get("/{case_id}/export")
async def export_case(
    case_id: CaseId,
    who: Analyst,
    ctx: CtxDep,
    store: StoreDep,
    desk: DeskDep,
    format: Literal["csv", "json"] = "json",
) -> Response:
    """The case with every call, alert reason and kept clip, in UTC and as offsets from
    the call's start (audited)."""
    case = await _get(store, case_id, who)
    clips = {c.call_id: (await desk.for_call(c.call_id)).items for c in case.calls}
    await ctx.audit.record(who, "case.export", case_id, format=format, tenant=case.tenant)
    name = f"{case_id}.{format}"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    if format == "csv":
        return Response(to_csv(case, clips), media_type="text/csv", headers=disposition)
    return JSONResponse(to_json(case, clips), headers=disposition)


# ---- pages --------------------------------------------------------------------------


@pages.get("/cases")
async def cases_page(request: Request, who: PageViewer, store: StoreDep) -> Response:
    return render(
        request,
        "cases.html",
        who,
        cases=[c for c in await store.list() if who.sees(c.tenant)],
        page="cases",
    )


@pages.get("/cases/{case_id}")
async def case_page(
    request: Request, case_id: CaseId, who: PageViewer, store: StoreDep
) -> Response:
    case = await store.get(case_id)
    if case is None or not who.sees(case.tenant):
        return render(request, "error.html", who, 404, message="No such case.")
    return render(
        request, "case.html", who, case=case, dispositions=list(Disposition), page="cases"
    )
