"""A case as CSV or JSON (issue 11): one line per linked call, per alert reason and per
kept clip, each with its time in UTC and as an offset from the call's start, so the
contact center can find the same moments in its own recordings. ANIs appear only as
their keyed hash."""

from __future__ import annotations

import csv
import io
from typing import Any

from dashboard.cases import Case, utc_at

COLUMNS = (
    "case_id",
    "title",
    "disposition",
    "loss_amount",
    "currency",
    "call_id",
    "link",
    "ani_hash",
    "call_started_utc",
    "item",
    "alert_id",
    "dimension",
    "band",
    "score",
    "offset_start_s",
    "offset_end_s",
    "start_utc",
    "end_utc",
)


def rows(case: Case, clips: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``clips``: call id -> its evidence items' public meta (``EvidenceMeta.public``)."""
    head = {
        "case_id": case.case_id,
        "title": _cell(case.title),
        "disposition": case.disposition.value,
        "loss_amount": str(case.loss_amount) if case.loss_amount is not None else "",
        "currency": case.currency,
    }
    out: list[dict[str, Any]] = []
    for call in case.calls:
        started = call.started_at.isoformat() if call.started_at else ""
        base = head | {
            "call_id": call.call_id,
            "link": call.link.value,
            "ani_hash": call.ani_hash,
            "call_started_utc": started,
        }
        out.append(base | {"item": "call", "offset_start_s": 0.0, "start_utc": started})
        for a in call.alerts:
            for r in a.reasons:
                out.append(
                    base
                    | {
                        "item": "alert_reason",
                        "alert_id": a.alert_id,
                        "dimension": r.dimension.value,
                        "band": a.band,
                        "score": r.score,
                        "offset_start_s": round(r.start_s, 3),
                        "offset_end_s": round(r.end_s, 3),
                        "start_utc": utc_at(call.started_at, r.start_s),
                        "end_utc": utc_at(call.started_at, r.end_s),
                    }
                )
        for clip in clips.get(call.call_id, []):
            if clip.get("kind") != "clip":
                continue
            offset = clip.get("call_offset_s")
            length = float(clip["end_s"]) - float(clip["start_s"])
            out.append(
                base
                | {
                    "item": "evidence_clip",
                    "alert_id": clip.get("alert_id") or "",
                    "offset_start_s": round(offset, 3) if offset is not None else "",
                    "offset_end_s": round(offset + length, 3) if offset is not None else "",
                    "start_utc": clip.get("start_utc") or "",
                    "end_utc": clip.get("end_utc") or "",
                }
            )
    return [{c: r.get(c, "") for c in COLUMNS} for r in out]


def _cell(text: str) -> str:
    """Free text a spreadsheet must not run as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def to_csv(case: Case, clips: dict[str, list[dict[str, Any]]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\r\n")
    w.writeheader()
    w.writerows(rows(case, clips))
    return buf.getvalue()


def to_json(case: Case, clips: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "case": case.model_dump(mode="json"),
        "evidence": {k: [c for c in v if c.get("kind") == "clip"] for k, v in clips.items()},
        "lines": rows(case, clips),
    }
