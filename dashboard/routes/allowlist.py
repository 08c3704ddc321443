"""The benign common audio allowlist (``/api/v1/allowlist``; DESIGN §2): the contact
center's own prompts, hold music and announcements, which replay and synthetic_voice
ignore. Changing it changes what raises alerts, so every change needs the admin role
and is audited; anyone from analyst up may list it.

Entries come from ``callshield allowlist add DIR`` (which fingerprints the audio and
posts here; the dashboard has no numpy) or from an admin confirming a *candidate*: audio
a bridge heard on the external legs of calls from many distinct ANIs. A rejected
candidate stays, marked, so bridges do not propose it again. No response carries a
fingerprint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dashboard import scoping
from dashboard.deps import Admin, Analyst, Context, CtxDep
from dashboard.masking import mask_text
from detectors.bus.allowlist import (
    CANDIDATE_ID,
    ENTRY_ID,
    MAX_FRAMES,
    TENANT_PATTERN,
    AllowlistEntry,
    new_entry_id,
)

router = APIRouter(tags=["allowlist"])

TenantQ = Annotated[str, Query(pattern=TENANT_PATTERN)]
CandidateP = Annotated[str, Path(pattern=CANDIDATE_ID)]
EntryP = Annotated[str, Path(pattern=ENTRY_ID)]
MAX_BATCH = 200


class AudioIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=200)
    source: str = Field(min_length=1, max_length=200)
    fingerprint: str = Field(max_length=8 * MAX_FRAMES)
    frames: int = Field(ge=1, le=MAX_FRAMES)


class AllowlistIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(default="default", pattern=TENANT_PATTERN)
    audio: list[AudioIn] = Field(min_length=1, max_length=MAX_BATCH)


class ConfirmIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=200)


def _now(ctx: Context) -> datetime:
    return datetime.fromtimestamp(ctx.clock(), UTC)


@router.get("/allowlist")
async def list_entries(who: Analyst, ctx: CtxDep, tenant: TenantQ = "default") -> dict[str, Any]:
    scoping.tenant(who, tenant)
    entries, bad = await ctx.allowlist.entries(tenant)
    return {
        "tenant": tenant,
        "version": await ctx.allowlist.version(tenant),
        "entries": [e.public() for e in entries],
        "unreadable": bad,
    }


@router.post("/allowlist", status_code=201)
async def add_entries(body: AllowlistIn, who: Admin, ctx: CtxDep) -> dict[str, Any]:
    """Fingerprints from ``callshield allowlist add``: one entry per audio file."""
    scoping.tenant(who, body.tenant)
    now = _now(ctx)
    try:
        entries = [
            AllowlistEntry(
                entry_id=new_entry_id(),
                tenant=body.tenant,
                label=a.label,
                source=a.source,
                origin="cli",
                fingerprint=a.fingerprint,
                frames=a.frames,
                added_by=who.name,
                created_at=now,
            )
            for a in body.audio
        ]
    except ValidationError as exc:
        raise HTTPException(422, _first_error(exc)) from None
    for e in entries:
        if e.frames != int(e.fingerprint.split(".", 1)[0]):
            raise HTTPException(422, f"{e.source}: frames does not match the fingerprint")
    version = 0
    for e in entries:
        version = await ctx.allowlist.add(e)
        await ctx.audit.record(
            who,
            "allowlist.add",
            e.entry_id,
            tenant=e.tenant,
            label=mask_text(e.label),
            source=mask_text(e.source),
            seconds=round(e.frames * 0.016, 1),
        )
    return {"tenant": body.tenant, "version": version, "entries": [e.public() for e in entries]}


@router.delete("/allowlist/{entry_id}")
async def remove_entry(
    entry_id: EntryP, who: Admin, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    if not await ctx.allowlist.remove(tenant, entry_id):
        raise HTTPException(404, "no such entry")
    await ctx.audit.record(who, "allowlist.remove", entry_id, tenant=tenant)
    return {"removed": entry_id, "version": await ctx.allowlist.version(tenant)}


@router.get("/allowlist/candidates")
async def list_candidates(
    who: Analyst, ctx: CtxDep, tenant: TenantQ = "default", status: str = "proposed"
) -> dict[str, Any]:
    """Audio proposed by the bridges (``status=all`` includes rejected ones)."""
    scoping.tenant(who, tenant)
    found, bad = await ctx.allowlist.candidates(tenant)
    shown = [c for c in found if status == "all" or c.status == status]
    return {"tenant": tenant, "candidates": [c.public() for c in shown], "unreadable": bad}


@router.post("/allowlist/candidates/{cand_id}/confirm", status_code=201)
async def confirm_candidate(
    cand_id: CandidateP, body: ConfirmIn, who: Admin, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    cand = await ctx.allowlist.candidate(tenant, cand_id)
    if cand is None:
        raise HTTPException(404, "no such candidate")
    entry = AllowlistEntry(
        entry_id=new_entry_id(),
        tenant=tenant,
        label=body.label,
        source=f"candidate {cand.cand_id}",
        origin="candidate",
        fingerprint=cand.fingerprint,
        frames=cand.frames,
        added_by=who.name,
        created_at=_now(ctx),
    )
    version = await ctx.allowlist.confirm(cand, entry)
    await ctx.audit.record(
        who,
        "allowlist.confirm",
        cand.cand_id,
        tenant=tenant,
        entry_id=entry.entry_id,
        label=mask_text(body.label),
        distinct_anis=cand.distinct_anis,
    )
    return {"version": version, "entry": entry.public()}


@router.post("/allowlist/candidates/{cand_id}/reject")
async def reject_candidate(
    cand_id: CandidateP, who: Admin, ctx: CtxDep, tenant: TenantQ = "default"
) -> dict[str, Any]:
    scoping.tenant(who, tenant)
    cand = await ctx.allowlist.candidate(tenant, cand_id)
    if cand is None:
        raise HTTPException(404, "no such candidate")
    await ctx.allowlist.reject(cand)
    await ctx.audit.record(who, "allowlist.reject", cand.cand_id, tenant=tenant)
    return {"rejected": cand.cand_id}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "audio"
    return f"{where}: {err.get('msg', 'invalid')}"
