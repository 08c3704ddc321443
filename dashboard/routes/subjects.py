"""``DELETE /api/v1/subjects/{ref}``: erase a data subject's biometric data and what
links to it (``detectors.bus.erasure``). Admins only, with a reason; audited with the
counts and a hash of the reference, never the reference in clear nor any voiceprint.
Evidence of a linked call on legal hold is kept and named in the answer."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from dashboard import scoping
from dashboard.deps import Admin, CtxDep
from dashboard.masking import mask_text
from detectors.bus.erasure import SubjectEraser

router = APIRouter(tags=["subjects"])

RefP = Annotated[str, Path(min_length=1, max_length=200)]


class ErasureIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=3, max_length=500)  # e.g. the request's ticket


def subject_digest(ref: str) -> str:
    """What the audit log keeps of an erased subject: enough to answer "was X erased,
    when, by whom" given X, not to read X back."""
    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()[:32]


@router.delete("/subjects/{ref}")
async def erase_subject(
    ref: RefP, body: ErasureIn, who: Admin, request: Request, ctx: CtxDep
) -> dict[str, Any]:
    """Erase enrolments, watchlist entries, claims, fingerprints and kept evidence of
    ``ref`` (a subject or case reference) in every tenant (platform-wide admins)."""
    scoping.platform(who)
    eraser: SubjectEraser = request.app.state.eraser
    desk = getattr(request.app.state, "evidence", None)

    async def held(call_id: str) -> bool:
        return desk is not None and await desk.hold_of(call_id) is not None

    done = await eraser.erase(ref, held)
    await ctx.audit.record(
        who,
        "subject.erase",
        subject_digest(ref),
        reason=mask_text(body.reason),
        tenants=sorted(set(done.enrolments) | {w.split("/")[0] for w in done.watchlist_entries}),
        **done.counts(),
        held_call_ids=done.held_calls,
    )
    return {"subject": subject_digest(ref), **done.counts(), "held_call_ids": done.held_calls}
