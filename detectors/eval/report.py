"""Turn per-call outcomes into the figures ``callshield eval`` prints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from detectors.eval.dataset import Item, Split, family_of
from detectors.eval.engine import CallOutcome
from detectors.eval.metrics import eer, rates_at


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def condition_report(
    items: Sequence[Item],
    outcomes: dict[str, CallOutcome],
    split: Split,
    *,
    aggregate: str,
    threshold: float,
    policy_threshold: float,
    by_family: bool = False,
) -> dict[str, Any]:
    """Figures for one detector in one condition, on the test speakers (with the
    threshold at EER of the calibration speakers applied to them, when there are any).
    ``by_family``: also the EER and miss rate of every spoof family (the speaker id's
    text before its first '_': ``gemini_Kore`` is family ``gemini``) against all test
    bona fide calls."""
    parts: dict[str, dict[str, list[float]]] = {
        p: {"bonafide": [], "spoof": []} for p in ("test", "calib")
    }
    families: dict[str, list[float]] = {}
    calls: Counter[str] = Counter()
    speakers: dict[str, set[str]] = {"bonafide": set(), "spoof": set()}
    abstained: dict[str, Counter[str]] = {"bonafide": Counter(), "spoof": Counter()}
    windows: Counter[str] = Counter()
    alerted: Counter[str] = Counter()
    for it in items:
        part = split.part(it.speaker)
        o = outcomes.get(it.call_id)
        if part is None or o is None:
            continue
        score = o.score(aggregate)
        if score is not None:
            parts[part][it.label].append(score)
            if part == "test" and it.label == "spoof":
                families.setdefault(family_of(it.speaker), []).append(score)
        if part != "test":
            continue
        calls[it.label] += 1
        speakers[it.label].add(it.speaker)
        windows["scored"] += len(o.scores)
        for reason, n in o.abstained.items():
            windows[reason] += n
        if score is None:
            abstained[it.label][o.abstention()] += 1
        if o.alerted:
            alerted[it.label] += 1
    test = parts["test"]
    e = eer(test["bonafide"], test["spoof"])
    fa, miss = rates_at(test["bonafide"], test["spoof"], threshold)
    out: dict[str, Any] = {
        "calls": {k: calls[k] for k in ("bonafide", "spoof")},
        "speakers": {k: len(v) for k, v in speakers.items()},
        "scored_calls": {k: len(test[k]) for k in ("bonafide", "spoof")},
        "abstained_calls": {k: dict(sorted(v.items())) for k, v in abstained.items()},
        "windows": dict(sorted(windows.items())),
        "eer": _r(e.eer) if e else None,
        "eer_threshold": _r(e.threshold) if e else None,
        "threshold": threshold,
        "false_alarm_rate": _r(fa),
        "miss_rate": _r(miss),
        # the live decision: the fusion's N-of-M rule at the policy threshold, per call;
        # an abstained call never alerts (it counts as a miss when spoof)
        "policy_threshold": policy_threshold,
        "false_alerts_per_call": _r(alerted["bonafide"] / calls["bonafide"])
        if calls["bonafide"]
        else None,
        "missed_calls": _r(1 - alerted["spoof"] / calls["spoof"]) if calls["spoof"] else None,
    }
    if by_family:
        out["by_family"] = {}
        for fam, scores in sorted(families.items()):
            fe = eer(test["bonafide"], scores)
            out["by_family"][fam] = {
                "scored_calls": len(scores),
                "eer": _r(fe.eer) if fe else None,
                "miss_rate": _r(rates_at([], scores, threshold)[1]),
            }
    calib = parts["calib"]
    ce = eer(calib["bonafide"], calib["spoof"])
    if ce is not None:
        cfa, cmiss = rates_at(test["bonafide"], test["spoof"], ce.threshold)
        out["calibrated"] = {
            "threshold": _r(ce.threshold),
            "calib_eer": _r(ce.eer),
            "false_alarm_rate": _r(cfa),
            "miss_rate": _r(cmiss),
            "calib_calls": {k: len(calib[k]) for k in ("bonafide", "spoof")},
        }
    return out


def format_text(report: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "   n/a" if x is None else f"{100 * x:5.1f}%"

    lines = [
        f"eval of {report['dataset']['dir']}: {report['dataset']['calls']} calls "
        f"({report['unit']}), score per call = {report['aggregate']} of scored windows",
    ]
    for det in report["detectors"]:
        tag = "  [test fixture, not a detector]" if det["fixture"] else ""
        lines.append(f"\n{det['name']} {det['version']}{tag}")
        if det["excluded_training_speakers"]:
            lines.append(f"  excluded {det['excluded_training_speakers']} training speakers")
        lines.append(
            "  condition     EER   (thr)   FA@thr  miss@thr  alerts/bona  missed  "
            "calls b/s  spk b/s  abstained b/s"
        )
        for cond, r in det["conditions"].items():
            ab = r["abstained_calls"]
            lines.append(
                f"  {cond:<11} {pct(r['eer'])} "
                f"({'n/a' if r['eer_threshold'] is None else format(r['eer_threshold'], '.3f')})"
                f" {pct(r['false_alarm_rate'])}  {pct(r['miss_rate'])}    "
                f"{pct(r['false_alerts_per_call'])}    {pct(r['missed_calls'])}  "
                f"{r['calls']['bonafide']}/{r['calls']['spoof']}  "
                f"{r['speakers']['bonafide']}/{r['speakers']['spoof']}  "
                f"{sum(ab['bonafide'].values())}/{sum(ab['spoof'].values())}"
            )
            for fam, f in r.get("by_family", {}).items():
                lines.append(
                    f"    spoof family {fam:<12} EER {pct(f['eer'])}  miss@thr "
                    f"{pct(f['miss_rate'])}  ({f['scored_calls']} scored calls)"
                )
            if "calibrated" in r:
                c = r["calibrated"]
                lines.append(
                    f"    threshold from calibration speakers {c['threshold']:.3f}: "
                    f"FA {pct(c['false_alarm_rate'])}, miss {pct(c['miss_rate'])}"
                )
    return "\n".join(lines)
