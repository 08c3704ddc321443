"""Watchlist entries and customer enrolments (``/api/v1/watchlist``,
``/api/v1/enrolments``): biometric data (issue 11), so every route needs the analyst
role, every change is audited, and no response carries a voiceprint.

The dashboard does not compute voiceprints (no numpy or model here): it stores one
computed by ``callshield watchlist add|enrol --wav`` (which posts here) and checked by
``detectors.bus.biometrics``. Listing a fraudster from a call (``call_id``) uses the
call's aggregated embedding that evidence retention kept (``dashboard.evidence``): once
it expired, or when none was kept, the answer is 409 with the reason.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dashboard import scoping
from dashboard.deps import Analyst, Context, CtxDep
from dashboard.evidence import EvidenceUnavailableError
from dashboard.masking import mask_text
from dashboard.routes.evidence import DeskDep
from detectors.bus.biometrics import (
    SUBJECT_PATTERN,
    TENANT_PATTERN,
    Enrolment,
    WatchlistEntry,
    new_id,
)

router = APIRouter(tags=["watchlist"])

TenantQ = Annotated[str, Query(pattern=TENANT_PATTERN)]
SubjectP = Annotated[str, Path(pattern=SUBJECT_PATTERN)]
MAX_DAYS = 3 * 366


class VoiceprintIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=120)
    dim: int = Field(ge=8, le=4096)
    embedding: str = Field(max_length=65_536)  # base64 float32 LE, unit length
    net_speech_s: float = Field(ge=0.0)
    source: str = Field(min_length=1, max_length=200)


class WatchlistIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(default="default", pattern=TENANT_PATTERN)
    label: str = Field(min_length=1, max_length=200)
    legal_basis: str = Field(min_length=1, max_length=200)
    case_ref: str = Field(min_length=1, max_length=200)
    expires_in_days: int = Field(ge=1, le=MAX_DAYS)
    voiceprint: VoiceprintIn | None = None
    call_id: str | None = Field(default=None, min_length=1, max_length=256)


class EnrolmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(default="default", pattern=TENANT_PATTERN)
    consent_ref: str = Field(min_length=1, max_length=200)
    expires_in_days: int | None = Field(default=None, ge=1, le=MAX_DAYS)
    voiceprint: VoiceprintIn


def _now(ctx: Context) -> datetime:
    return datetime.fromtimestamp(ctx.clock(), UTC)


async def _voiceprint(body: WatchlistIn, desk: DeskDep) -> VoiceprintIn:
    if body.voiceprint is not None and body.call_id is not None:
        raise HTTPException(422, "give a voiceprint or a call_id, not both")
    if body.voiceprint is not None:
        return body.voiceprint
    if body.call_id is not None:
        try:
            return VoiceprintIn(**await desk.voiceprint(body.call_id, body.tenant))
        except EvidenceUnavailableError as exc:
            raise HTTPException(
                409, f"{exc}; enrol from the call's audio with `callshield watchlist add --wav`"
            ) from None
        except ValueError as exc:
            raise HTTPException(503, f"the call's evidence does not open here: {exc}") from None
    raise HTTPException(422, "a voiceprint (from `callshield watchlist add --wav`) is needed")


async def _expire(ctx: Context, who: Any, tenant: str) -> None:
    gone = await ctx.biometrics.purge_expired(tenant, _now(ctx))
    for entry_id in gone:
        await ctx.audit.record(who, "watchlist.expire", entry_id, tenant=tenant)


@router.get("/watchlist")
async def list_entries(who: Analyst, ctx: CtxDep, tenant: TenantQ = "default") -> dict[str, Any]:
    """The tenant's entries without their voiceprints (expired ones are deleted first)."""
    scoping.tenant(who, tenant)
    await _expire(ctx, who, tenant)
    entries, bad = await ctx.biometrics.entries(tenant)
    return {
        "tenant": tenant,
        "version": await ctx.biometrics.version(tenant),
        "entries": [e.public() for e in entries],
        "unreadable": bad,
    }


@router.post("/watchlist", status_code=201)
async def add_entry(body: WatchlistIn, who: Analyst, ctx: CtxDep, desk: DeskDep) -> dict[str, Any]:
    """List a fraudster's voice: legal basis, case reference and expiry required. The
    voice comes from a voiceprint file or from a call whose embedding was kept."""
    scoping.tenant(who, body.tenant)
    if body.call_id is not None:
        await scoping.evidence(ctx, desk, who, body.call_id)  # outlives the call state
    vp = await _voiceprint(body, desk)
    now = _now(ctx)
    try:
        entry = WatchlistEntry(
            entry_id=new_id("wl"),
            tenant=body.tenant,
            label=body.label,
            legal_basis=body.legal_basis,
            case_ref=body.case_ref,
            expires_at=now + timedelta(days=body.expires_in_days),
            added_by=who.name,
            created_at=now,
            # two-person rule: pending (unused by the bridges) until another analyst
            # approves it (dashboard.routes.watchlist_review)
            status="pending" if ctx.settings.watchlist_two_person else "active",
            **vp.model_dump(),
        )
    except ValidationError as exc:
        raise HTTPException(422, _first_error(exc)) from None
    await ctx.biometrics.add_entry(entry)
    await ctx.audit.record(
        who,
        "watchlist.add",
        entry.entry_id,
        tenant=entry.tenant,
        case_ref=mask_text(entry.case_ref),
        legal_basis=mask_text(entry.legal_basis),
        expires_at=entry.expires_at.isoformat(),
        source=mask_text(entry.source),
        status=entry.status,
    )
    return entry.public()


@router.delete("/watchlist/{entry_id}")
async def remove_entry(
    entry_id: Annotated[str, Path(pattern=r"^wl_[0-9a-f]{16}$")],
    who: Analyst,
    ctx: CtxDep,
    tenant: TenantQ = "default",
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    if not await ctx.biometrics.remove_entries(tenant, [entry_id]):
        raise HTTPException(404, "no such entry")
    await ctx.audit.record(who, "watchlist.remove", entry_id, tenant=tenant)
    return {"removed": entry_id, "version": await ctx.biometrics.version(tenant)}


@router.put("/enrolments/{subject}")
async def enrol(subject: SubjectP, body: EnrolmentIn, who: Analyst, ctx: CtxDep) -> dict[str, Any]:
    """A customer's voiceprint under their subject (account) reference; needs consent."""
    scoping.tenant(who, body.tenant)
    now = _now(ctx)
    expires = now + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    try:
        enrolment = Enrolment(
            subject=subject,
            tenant=body.tenant,
            consent_ref=body.consent_ref,
            expires_at=expires,
            added_by=who.name,
            created_at=now,
            **body.voiceprint.model_dump(),
        )
    except ValidationError as exc:
        raise HTTPException(422, _first_error(exc)) from None
    await ctx.biometrics.put_enrolment(enrolment)
    await ctx.audit.record(
        who,
        "enrolment.put",
        mask_text(subject),
        tenant=body.tenant,
        consent_ref=mask_text(body.consent_ref),
    )
    return enrolment.public()


@router.get("/enrolments/{subject}")
async def get_enrolment(
    subject: SubjectP, who: Analyst, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    found = await ctx.biometrics.enrolment(tenant, subject)
    if found is None:
        raise HTTPException(404, "no enrolment for that subject")
    return found.public()


@router.delete("/enrolments/{subject}")
async def remove_enrolment(
    subject: SubjectP, who: Analyst, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    if not await ctx.biometrics.remove_enrolment(tenant, subject):
        raise HTTPException(404, "no enrolment for that subject")
    await ctx.audit.record(who, "enrolment.remove", mask_text(subject), tenant=tenant)
    return {"removed": True}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "voiceprint"
    return f"{where}: {err.get('msg', 'invalid')}"
