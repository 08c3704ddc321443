"""Score fusion of two models of one dimension, measured offline, honestly: the fusion
weight and the thresholds are chosen on one labelled set (dev), the figures reported on
another (test).

Input: ``callshield eval DIR --per-call --json`` reports (each call's window scores per
detector and condition; a report may hold both models, or one each: reports are merged
by detector name). Both models must cut the same windows (same rate, window, hop and
minimum net speech, as every synthetic_voice model here): a call's windows are fused
pairwise, in time order, then pooled per call as ``callshield eval`` pools them (the
mean of P(spoof); ``--aggregate`` median, max, or ``logit-mean``: the sigmoid of the mean
logit); calls whose two window lists differ in length are left out and counted.

Rules (``RULES``), per window, P = each model's P(spoof), ``w`` the first model's weight:

- ``a``, ``b``: either model alone (a check: they reproduce ``callshield eval``'s EERs);
- ``logit``: sigmoid(w·logit(P_a) + (1 − w)·logit(P_b)), w = 0.5 (mean of logits);
- ``prob``: w·P_a + (1 − w)·P_b, w = 0.5 (mean of probabilities);
- ``logit-dev``, ``prob-dev``: the same with w chosen on dev (``--choose-on``, g711 by
  default: the condition of the goal) from 0, 0.05, …, 1 by the lowest dev EER (ties to
  the w nearest 0.5).

Thresholds per rule: the model card's rule (``detectors.synthetic.build.threshold_rule``:
the 95 % upper bound of the 98th percentile of every dev genuine window, never below the
2 %-of-dev-calls point) on the fused dev windows of each dev condition; test g711 and
g711_loss5 are read at the g711 one (as ``callshield eval`` reads a manifest's ``pcmu``),
test clean at the largest (the manifest's ``default``). Dev reports of further
packet-loss seeds (``--dev`` more than once, each its own ``--seed``) add windows to the
loss condition's genuine evidence, as the build's channel draws do.

    python -m detectors.eval.fusion_study --dev DEV.json [--dev DEV_SEED1.json ...] \\
        --test TEST.json --a MODEL_A --b MODEL_B [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detectors.eval.dataset import family_of
from detectors.eval.metrics import eer, rates_at

RULES = ("a", "b", "logit", "prob", "logit-dev", "prob-dev")
GRID = tuple(round(0.05 * i, 2) for i in range(21))
EPS = 1e-6  # P(spoof) clipped to [EPS, 1 - EPS] before the logit
POOL: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda x: float(np.mean(x)),
    "median": lambda x: float(np.median(x)),
    "max": lambda x: float(np.max(x)),
    "logit-mean": lambda x: float(1.0 / (1.0 + np.exp(-np.mean(logit(x))))),
}


@dataclass(frozen=True, slots=True)
class Call:
    label: str  # "bonafide" | "spoof"
    speaker: str
    windows: tuple[float, ...]


Calls = dict[str, Call]  # call id -> Call, of one detector in one condition of one report


def load_reports(paths: Sequence[Path]) -> list[dict[tuple[str, str], Calls]]:
    """Each report's per-call scores, by (detector, condition); only evaluated calls
    (a speaker the model trained on has part None and is left out)."""
    out = []
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        got: dict[tuple[str, str], Calls] = {}
        for det in report["detectors"]:
            if "calls" not in det:
                raise ValueError(f"{path}: no per-call scores (run eval with --per-call)")
            for cond, calls in det["calls"].items():
                got[(det["name"], cond)] = {
                    cid: Call(c["label"], c["speaker"], tuple(float(s) for s in c["windows"]))
                    for cid, c in calls.items()
                    if c["part"] is not None
                }
        out.append(got)
    return out


def merge(reports: list[dict[tuple[str, str], Calls]]) -> dict[tuple[str, str], list[Calls]]:
    """Per (detector, condition), its calls in every report that holds them, in report
    order: one report may hold both models, or one report each (matched by position)."""
    per: dict[tuple[str, str], list[Calls]] = {}
    for r in reports:
        for key, calls in r.items():
            per.setdefault(key, []).append(calls)
    return per


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, float), EPS, 1.0 - EPS)
    out: np.ndarray = np.log(q) - np.log1p(-q)
    return out


def fuse(a: np.ndarray, b: np.ndarray, rule: str, w: float) -> np.ndarray:
    """Window scores of the fusion ``rule`` (``logit``/``prob`` families, ``a``, ``b``)."""
    if rule == "a":
        return np.asarray(a, float)
    if rule == "b":
        return np.asarray(b, float)
    if rule.startswith("logit"):
        z = w * logit(a) + (1.0 - w) * logit(b)
        out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
        return out
    if rule.startswith("prob"):
        out = w * np.asarray(a, float) + (1.0 - w) * np.asarray(b, float)
        return out
    raise ValueError(f"unknown rule {rule!r} (one of {', '.join(RULES)})")


@dataclass(slots=True)
class Scored:
    """One rule in one condition: each paired call's pooled score and fused windows."""

    calls: dict[str, tuple[str, str, float, np.ndarray]]  # id -> (label, speaker, score, wins)
    mismatched: int


def score_pairs(a: Calls, b: Calls, rule: str, w: float, pool: str = "mean") -> Scored:
    out: dict[str, tuple[str, str, float, np.ndarray]] = {}
    mismatched = 0
    for cid, ca in a.items():
        cb = b.get(cid)
        if cb is None:
            continue
        if len(ca.windows) != len(cb.windows):
            mismatched += 1
            continue
        if not ca.windows:
            continue  # abstained by both: no score, as in callshield eval
        wins = fuse(np.array(ca.windows), np.array(cb.windows), rule, w)
        out[cid] = (ca.label, ca.speaker, POOL[pool](wins), wins)
    return Scored(out, mismatched)


def _split(s: Scored) -> tuple[list[float], list[float], dict[str, list[float]]]:
    bona = [v[2] for v in s.calls.values() if v[0] == "bonafide"]
    spoof = [v[2] for v in s.calls.values() if v[0] == "spoof"]
    fam: dict[str, list[float]] = {}
    for label, spk, score, _ in s.calls.values():
        if label == "spoof":
            fam.setdefault(family_of(spk), []).append(score)
    return bona, spoof, fam


def eer_of(s: Scored) -> float | None:
    bona, spoof, _ = _split(s)
    r = eer(bona, spoof)
    return None if r is None else r.eer


def choose_weight(a: Calls, b: Calls, rule: str, pool: str = "mean") -> float:
    """The grid weight with the lowest EER on these (dev) calls; ties to the w nearest 0.5."""
    best: tuple[float, float, float] | None = None
    for w in GRID:
        e = eer_of(score_pairs(a, b, rule, w, pool))
        if e is None:
            continue
        key = (round(e, 9), abs(w - 0.5), w)
        if best is None or key < best:
            best = key
    if best is None:
        raise ValueError("no EER on the weight-choice calls (need both classes)")
    return best[2]


def dev_threshold(seeds: list[Scored]) -> dict[str, float]:
    """The card's threshold rule on the dev genuine calls (first seed) and every dev
    genuine window of every seed."""
    from detectors.synthetic.build import threshold_rule

    calls = [v[2] for v in seeds[0].calls.values() if v[0] == "bonafide"]
    windows = [
        float(x) for s in seeds for v in s.calls.values() if v[0] == "bonafide" for x in v[3]
    ]
    return threshold_rule(calls, windows)


def figures(s: Scored, threshold: float) -> dict[str, Any]:
    bona, spoof, fam = _split(s)
    e = eer(bona, spoof)
    fa, miss = rates_at(bona, spoof, threshold)
    return {
        "eer": None if e is None else round(e.eer, 4),
        "threshold": round(threshold, 6),
        "false_alarm": None if fa is None else round(fa, 4),
        "false_alarm_calls": f"{sum(x >= threshold for x in bona)}/{len(bona)}",
        "miss": None if miss is None else round(miss, 4),
        "scored": {"bonafide": len(bona), "spoof": len(spoof)},
        "mismatched_calls": s.mismatched,
        "by_family": {
            f: {
                "eer": None if (r := eer(bona, v)) is None else round(r.eer, 4),
                "missed": f"{sum(x < threshold for x in v)}/{len(v)}",
            }
            for f, v in sorted(fam.items())
        },
    }


def study(
    dev_paths: Sequence[Path],
    test_paths: Sequence[Path],
    model_a: str,
    model_b: str,
    choose_on: str = "g711",
    pool: str = "mean",
    rules: Sequence[str] = RULES,
) -> dict[str, Any]:
    dev = merge(load_reports(dev_paths))
    test = merge(load_reports(test_paths))

    def pairs(src: dict[tuple[str, str], list[Calls]], cond: str) -> list[tuple[Calls, Calls]]:
        a, b = src.get((model_a, cond), []), src.get((model_b, cond), [])
        return list(zip(a, b, strict=False))

    conds_dev = sorted({c for (_, c) in dev if pairs(dev, c)})
    conds_test = sorted({c for (_, c) in test if pairs(test, c)})
    if choose_on not in conds_dev:
        raise ValueError(f"no dev scores of both models under {choose_on!r}")
    out: dict[str, Any] = {"a": model_a, "b": model_b, "pool": pool, "rules": {}}
    for rule in rules:
        w = 0.5
        if rule.endswith("-dev"):
            a0, b0 = pairs(dev, choose_on)[0]
            w = choose_weight(a0, b0, rule, pool)
        thr: dict[str, dict[str, float]] = {}
        dev_fig: dict[str, Any] = {}
        for cond in conds_dev:
            seeds = [score_pairs(a, b, rule, w, pool) for a, b in pairs(dev, cond)]
            thr[cond] = dev_threshold(seeds)
            dev_fig[cond] = figures(seeds[0], thr[cond]["threshold"])
            dev_fig[cond]["threshold_rule"] = {k: round(v, 6) for k, v in thr[cond].items()}
            dev_fig[cond]["seeds"] = len(seeds)
        strictest = max(t["threshold"] for t in thr.values())
        pcmu = thr.get("g711", {}).get("threshold", strictest)
        test_fig = {}
        for cond in conds_test:
            a, b = pairs(test, cond)[0]
            test_fig[cond] = figures(
                score_pairs(a, b, rule, w, pool), strictest if cond == "clean" else pcmu
            )
        out["rules"][rule] = {"weight_a": w, "dev": dev_fig, "test": test_fig}
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def format_table(result: dict[str, Any]) -> str:
    """One markdown row per (rule, part, condition): EER, FA and miss at the threshold,
    per-family EER (missed at the threshold)."""
    fams = sorted(
        {
            f
            for r in result["rules"].values()
            for part in ("dev", "test")
            for c in r[part].values()
            for f in c["by_family"]
        }
    )
    head = ["rule", "w_a", "part", "cond", "EER", "thr", "FA (calls)", "miss", *fams]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in result["rules"].items():
        for part in ("dev", "test"):
            for cond, c in r[part].items():
                row = [
                    name,
                    f"{r['weight_a']:.2f}",
                    part,
                    cond,
                    _pct(c["eer"]),
                    f"{c['threshold']:.3f}",
                    f"{_pct(c['false_alarm'])} ({c['false_alarm_calls']})",
                    _pct(c["miss"]),
                ]
                for f in fams:
                    v = c["by_family"].get(f)
                    row.append("" if v is None else f"{_pct(v['eer'])} ({v['missed']})")
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m detectors.eval.fusion_study", description=__doc__)
    p.add_argument("--dev", type=Path, action="append", required=True)
    p.add_argument("--test", type=Path, action="append", required=True)
    p.add_argument("--a", required=True, help="first model's name (its weight is w)")
    p.add_argument("--b", required=True, help="second model's name")
    p.add_argument("--choose-on", default="g711", help="dev condition for the weight")
    p.add_argument("--aggregate", choices=sorted(POOL), default="mean")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        result = study(args.dev, args.test, args.a, args.b, args.choose_on, args.aggregate)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
