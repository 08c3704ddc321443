"""Evidence around alerts (``/api/v1/evidence``; ``dashboard.evidence`` says who may do
what). The clip endpoint is what the call page's ``<audio>`` element plays: it opens
the sealed clip and answers WAV, and every request for it is audited as a playback."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection

from dashboard import scoping
from dashboard.deps import Admin, Analyst, CtxDep
from dashboard.evidence import EvidenceDesk, EvidenceUnavailableError
from dashboard.masking import mask_text

router = APIRouter(prefix="/evidence", tags=["evidence"])

CallId = Annotated[str, Path(min_length=1, max_length=256)]
AlertId = Annotated[str, Path(min_length=1, max_length=256)]
# a username, or an API key's principal name ("key:<name>")
Name = Annotated[str, Path(pattern=r"^(key:)?[A-Za-z0-9._@-]{1,64}$")]


def evidence_desk(conn: HTTPConnection) -> EvidenceDesk:
    desk: EvidenceDesk = conn.app.state.evidence
    return desk


DeskDep = Annotated[EvidenceDesk, Depends(evidence_desk)]


class HoldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=3, max_length=500)  # e.g. the legal matter's reference


@router.get("/calls/{call_id}")
async def call_evidence(
    call_id: CallId, who: Analyst, ctx: CtxDep, desk: DeskDep
) -> dict[str, Any]:
    """What the call kept (times in UTC and as offsets from its start, expiry, hold)
    and what already expired; never the content."""
    await scoping.evidence(ctx, desk, who, call_id)
    found = await desk.for_call(call_id)
    return {
        "call_id": call_id,
        "items": found.items,
        "expired": found.gone,
        "legal_hold": found.hold,
        "may_play": await desk.may_review(who),
    }


@router.get("/calls/{call_id}/clips/{alert_id}/audio")
async def play_clip(
    call_id: CallId, alert_id: AlertId, who: Analyst, ctx: CtxDep, desk: DeskDep
) -> Response:
    """The external leg's audio around the alert, as WAV (reviewers; audited)."""
    await scoping.evidence(ctx, desk, who, call_id)
    if not await desk.may_review(who):
        raise HTTPException(403, "needs the evidence reviewer permission (an admin grants it)")
    try:
        meta, wav = await desk.clip_wav(call_id, alert_id)
    except EvidenceUnavailableError as exc:
        raise HTTPException(409, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(503, f"the evidence does not open here: {exc}") from None
    if not who.sees(meta.tenant):  # this record's own tenant, whatever the others name
        raise HTTPException(404, "no such call")
    await ctx.audit.record(
        who,
        "evidence.play",
        call_id,
        alert_id=alert_id,
        start_s=meta.start_s,
        end_s=meta.end_s,
        bytes=len(wav),
    )
    return Response(
        wav,
        media_type="audio/wav",
        headers={"Content-Disposition": f'inline; filename="clip-{alert_id}.wav"'},
    )


@router.put("/calls/{call_id}/hold")
async def set_hold(
    call_id: CallId, body: HoldIn, who: Admin, ctx: CtxDep, desk: DeskDep
) -> dict[str, Any]:
    """Legal hold: the call's evidence stops expiring until the hold is lifted."""
    await scoping.evidence(ctx, desk, who, call_id)
    if not await desk.reader.receipts(call_id):
        raise HTTPException(404, "no evidence was kept for that call")
    held = await desk.hold(call_id, who.name, mask_text(body.reason))
    await ctx.audit.record(
        who, "evidence.hold", call_id, records=held, reason=mask_text(body.reason)
    )
    return {"call_id": call_id, "held": held}


@router.delete("/calls/{call_id}/hold")
async def lift_hold(call_id: CallId, who: Admin, ctx: CtxDep, desk: DeskDep) -> dict[str, Any]:
    """Lift the hold: each record expires at its own time again (now, if past)."""
    await scoping.evidence(ctx, desk, who, call_id)
    if not await desk.release(call_id):
        raise HTTPException(404, "that call's evidence is not on hold")
    await ctx.audit.record(who, "evidence.release", call_id)
    return {"call_id": call_id, "held": 0}


@router.get("/reviewers")
async def list_reviewers(who: Admin, desk: DeskDep) -> dict[str, Any]:
    scoping.platform(who)
    return await desk.reviewers()


@router.put("/reviewers/{name}")
async def grant_reviewer(name: Name, who: Admin, ctx: CtxDep, desk: DeskDep) -> dict[str, str]:
    """Let an analyst (user or API-key name) play evidence clips (platform-wide admins)."""
    scoping.platform(who)
    await desk.grant(name, who.name)
    await ctx.audit.record(who, "evidence.reviewer_grant", name)
    return {"reviewer": name}


@router.delete("/reviewers/{name}")
async def revoke_reviewer(name: Name, who: Admin, ctx: CtxDep, desk: DeskDep) -> dict[str, str]:
    scoping.platform(who)
    if not await desk.revoke(name):
        raise HTTPException(404, "not a reviewer")
    await ctx.audit.record(who, "evidence.reviewer_revoke", name)
    return {"revoked": name}
