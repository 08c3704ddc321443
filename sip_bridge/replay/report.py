"""The replay's report: one JSON document (``--json``) or text for a person.

Both carry the same facts: the detectors that ran, each leg's media (packets, loss,
late and reordered packets, concealment per second of the call), every window's score
per dimension (the timeline), and the alerts fusion raised, each with the offset into
the call of the window that opened it. Nothing in them depends on the wall clock or
the replay speed except ``wall_s`` and ``speed``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from detectors.alert_schema import Alert
from sip_bridge.replay.engine import FRAME_NS, ReplayResult
from sip_bridge.replay.sip_calls import CaptureCalls, Unassociated


def to_json(result: ReplayResult) -> dict[str, Any]:
    rec = result.recording
    sip = {"sip_call_id": rec.sip_call_id} if rec.sip_call_id else {}
    return {
        "input": rec.description,
        "call_id": result.call_id,
        **sip,
        "duration_s": round(result.ticks * FRAME_NS / 1e9, 2),
        "speed": result.speed,
        "wall_s": round(result.wall_s, 2),
        "skipped": dict(sorted(rec.skipped.items())),
        "detectors": [
            {
                "name": d.spec.name,
                "version": d.spec.version,
                "dimension": d.spec.dimension.value,
                "provider": d.provider,
                "window_s": round(d.spec.window_s, 3),
                "hop_s": round(d.spec.hop_s, 3),
            }
            for d in result.detectors
        ],
        "legs": [
            {
                "leg": leg.track.label,
                "role": leg.track.role.value,
                "source": leg.track.source,
                "analysed": leg.analysed,
                "packets_in_file": len(leg.track.packets),
                **leg.stats,
                "frames": dict(sorted(leg.flags.items())),
                "concealed_pct_per_s": [
                    round(100.0 * c / p, 1) if p else None
                    for p, c in zip(leg.played, leg.concealed, strict=True)
                ],
            }
            for leg in result.legs
        ],
        "timeline": _timeline(result),
        "alerts": alerts_json(result.alerts),
    }


def _timeline(result: ReplayResult) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sorted(
        result.scores,
        key=lambda s: (s.dimension.value, s.leg_id, s.window_start_s, s.window_end_s),
    ):
        out[s.dimension.value].append(
            {
                "leg": s.leg_id,
                "start_s": round(s.window_start_s, 3),
                "end_s": round(s.window_end_s, 3),
                "score": None if s.score is None else round(s.score, 4),
                "abstained": s.abstained.value if s.abstained else None,
                "concealed_ratio": round(s.quality.concealed_ratio, 3),
                "net_speech_s": round(s.quality.net_speech_s, 2),
            }
        )
    return dict(sorted(out.items()))


def alerts_json(alerts: list[Alert]) -> list[dict[str, Any]]:
    """One entry per alert (its revisions folded): where it was raised and how it ended."""
    by_id: dict[str, list[Alert]] = defaultdict(list)
    for a in alerts:
        by_id[a.alert_id].append(a)
    out = []
    for revisions in by_id.values():
        revisions.sort(key=lambda a: a.revision)
        first, last = revisions[0], revisions[-1]
        out.append(
            {
                "alert_id": first.alert_id,
                "call_id": first.call_id,
                "dimension": first.dimension.value,
                "episode": first.episode,
                "raised_at_s": round(max(r.end_s for r in first.reasons), 3)
                if first.reasons
                else None,
                "band": last.band.value,
                "score": round(last.score, 4),
                "threshold": last.threshold,
                "revisions": len(revisions),
                "call_state": last.call_state.value,
                "reasons": [r.detail for r in last.reasons],
            }
        )
    out.sort(key=lambda a: (a["raised_at_s"] or 0.0, a["dimension"]))
    return out


def to_text(result: ReplayResult, step_s: float = 1.0) -> str:
    doc = to_json(result)
    pace = f"speed {result.speed:g}" if result.speed else "as fast as possible"
    lines = [
        f"replay of {doc['input']}",
        f"call {doc['call_id']}: {doc['duration_s']:.2f} s of virtual time in "
        f"{doc['wall_s']:.2f} s ({pace})",
    ]
    if doc["skipped"]:
        lines.append("skipped: " + ", ".join(f"{k} {v}" for k, v in doc["skipped"].items()))
    lines.append("")
    if doc["detectors"]:
        lines.append("detectors:")
        for d in doc["detectors"]:
            lines.append(
                f"  {d['name']} {d['version']} ({d['dimension']}) on {d['provider']}: "
                f"window {d['window_s']:g} s, hop {d['hop_s']:g} s"
            )
    else:
        lines.append(
            "detectors: none installed (callshield models install ..., or --dev-fixture-models)"
        )
    lines += ["", "media (per leg):"]
    for leg in doc["legs"]:
        lines.append(
            f"  {leg['leg']:9} {leg['source']}"
            + ("" if leg["analysed"] else "  [not analysed: internal leg]")
        )
        lines.append(
            f"            received {leg['packets_received']}, lost {leg['packets_lost']}, "
            f"late {leg['packets_late']}, duplicate {leg['packets_duplicate']}, "
            f"reordered {leg['packets_reordered']}, "
            f"concealed {leg['concealed_samples'] / 8:.0f} ms in {leg['concealment_events']} "
            f"events, target delay {leg['target_delay_ms']} ms"
        )
        per_s = leg["concealed_pct_per_s"]
        if any(v for v in per_s if v):
            cells = ["." if v is None else f"{v:.0f}" for v in per_s]
            lines.append("            concealed % per second: " + " ".join(cells))
    lines += [
        "",
        f"timeline (per {step_s:g} s: highest window score ending in it; "
        "a = all windows abstained):",
    ]
    for dim, windows in doc["timeline"].items():
        buckets: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for w in windows:
            buckets[(w["leg"], int(w["end_s"] // step_s))].append(w)
        for (leg_id, b), ws in sorted(buckets.items()):
            scored = [w["score"] for w in ws if w["score"] is not None]
            conceal = max(w["concealed_ratio"] for w in ws)
            if scored:
                cell = f"{max(scored):.2f}"
            else:
                reasons = sorted({w["abstained"] or "" for w in ws})
                cell = "a (" + ", ".join(reasons) + ")"
            lines.append(
                f"  {b * step_s:6.1f} s  {dim:16} {leg_id:9} {cell:28} "
                f"concealed {100 * conceal:3.0f}%"
            )
    lines += ["", "alerts:" if doc["alerts"] else "alerts: none"]
    for a in doc["alerts"]:
        at = "?" if a["raised_at_s"] is None else f"{a['raised_at_s']:.2f} s"
        lines.append(
            f"  at {at}: {a['dimension']} {a['band']} (score {a['score']:.2f} >= "
            f"{a['threshold']:.2f}), alert {a['alert_id']}, {a['revisions']} revision(s), "
            f"{a['call_state']}"
        )
        for r in a["reasons"][:3]:
            lines.append(f"      {r}")
    return "\n".join(lines) + "\n"


def calls_to_json(capture: CaptureCalls, results: list[ReplayResult]) -> dict[str, Any]:
    """A capture of several calls: one report per call (as ``to_json``), the calls whose
    SDP no RTP matched, and the RTP streams no call explains."""
    return {
        "input": str(capture.path),
        "skipped": dict(sorted(capture.skipped.items())),
        "calls": [to_json(r) for r in results],
        "calls_without_media": list(capture.without_media),
        "unassociated": [_unassociated_json(u) for u in capture.unassociated],
    }


def _unassociated_json(u: Unassociated) -> dict[str, Any]:
    return {
        "ssrc": f"0x{u.ssrc:08x}",
        "src": f"{u.src[0]}:{u.src[1]}",
        "dst": f"{u.dst[0]}:{u.dst[1]}",
        "packets": u.packets,
        "first_s": u.first_s,
        "reason": u.reason,
        **({"sip_call_id": u.sip_call_id} if u.sip_call_id else {}),
    }


def calls_to_text(capture: CaptureCalls, results: list[ReplayResult], step_s: float = 1.0) -> str:
    doc = calls_to_json(capture, results)
    lines = [f"capture {doc['input']}: {len(results)} call(s) with media"]
    if doc["skipped"]:
        lines.append("skipped: " + ", ".join(f"{k} {v}" for k, v in doc["skipped"].items()))
    for i, r in enumerate(results, 1):
        lines += ["", f"=== call {i} of {len(results)}: SIP Call-ID {r.recording.sip_call_id}"]
        lines.append(to_text(r, step_s).rstrip("\n"))
    if doc["calls_without_media"]:
        lines += ["", "calls with SDP but no RTP in the capture:"]
        lines += [f"  {c}" for c in doc["calls_without_media"]]
    lines += ["", "unassociated RTP streams:" if doc["unassociated"] else "unassociated: none"]
    for u in doc["unassociated"]:
        lines.append(
            f"  ssrc {u['ssrc']} {u['src']} -> {u['dst']}: {u['packets']} packets from "
            f"{u['first_s']:.2f} s; {u['reason']}"
            + (f" ({u['sip_call_id']})" if "sip_call_id" in u else "")
        )
    return "\n".join(lines) + "\n"
