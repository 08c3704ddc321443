"""``callshield eval DIR --sessions``: false alerts per 1,000 genuine calls and per
call-hour on multi-minute sessions, per channel, at a policy (the shipped default unless
``--policy``), with the miss rate on spoof sessions at the same policy beside it.

One session per speaker (``sessions.render``: that speaker only, pauses, repeats when
the speaker has little speech), on the speakers a model was not trained on. Every session
crosses a channel (``channels``) and then the live pipeline as µ-law RTP (``engine``'s
``g711`` condition: jitter buffer, frame bank, scheduler). Alerts are counted per call by
replaying the policy over the call's window scores (``detectors.bus.policy_sim``, the
same N-of-M opening, release and per-call cap as fusion; its test holds it to fusion's
counts), and fusion's own any-alert verdict is kept beside it as a check.

The bounds are exact 95 % two-sided: Clopper-Pearson on the share of genuine calls that
alerted and on the miss rate, and the Poisson (Garwood) bound on alerts per call-hour.
With n genuine calls and no alert the upper bound is about 3.7/n: showing ≤ 1 per 1,000
takes some 3,700 alert-free calls, far more than a small corpus holds.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detectors.bus.policy import DimensionPolicy
from detectors.bus.policy_sim import Window, alert_score, alerts_on
from detectors.contract import Detector
from detectors.eval import channels, sessions
from detectors.eval.audio import FloatArray
from detectors.eval.dataset import Item, family_of
from detectors.eval.engine import CallOutcome, run_condition
from detectors.fusion import Policy

Z_ALPHA = 0.05  # two-sided 95 %


@dataclass(frozen=True, slots=True)
class SessionConfig:
    minutes: float = 3.0
    channels: tuple[str, ...] = tuple(channels.CHANNELS)
    max_sessions: int | None = None  # genuine sessions, in speaker order
    max_spoof_sessions: int | None = None  # drawn round-robin over spoof families
    min_unique_s: float = 3.0  # speakers with less distinct speech are left out
    seed: int = 0


def plan(
    files: Sequence[Item], excluded: set[str], cfg: SessionConfig
) -> tuple[list[Item], list[str]]:
    """One session ``Item`` per (label, speaker) not in ``excluded`` with enough speech
    (spoof sessions taken a family at a time, so a cap keeps every family); and the
    speakers left out for too little speech."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for it in files:
        if it.speaker not in excluded:
            groups.setdefault((it.label, it.speaker), []).extend(it.files)
    out: list[Item] = []
    short: list[str] = []
    by_family: dict[str, list[Item]] = {}
    for (label, spk), fs in sorted(groups.items()):
        unique = sum(len(sessions._utterance(f)) for f in fs) / sessions.RATE
        if unique < cfg.min_unique_s:
            short.append(spk)
            continue
        it = Item(f"{label}/{spk}#session", label, spk, tuple(fs))
        if label == "bonafide":
            if cfg.max_sessions is None or len(out) < cfg.max_sessions:
                out.append(it)
        else:
            by_family.setdefault(family_of(spk), []).append(it)
    spoof: list[Item] = []
    queues = [list(v) for _, v in sorted(by_family.items())]
    cap = cfg.max_spoof_sessions
    while any(queues) and (cap is None or len(spoof) < cap):
        for q in queues:
            if q and (cap is None or len(spoof) < cap):
                spoof.append(q.pop(0))
    out.extend(spoof)
    return out, short


def _seed(text: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{text}".encode()).digest()[:4], "big")


def loader(
    channel: str, items: Sequence[Item], cfg: SessionConfig
) -> Callable[[Item], tuple[FloatArray, int]]:
    """An ``engine`` audio loader: the item's session through ``channel``. Babble talkers
    are other sessions' speakers of the same label, drawn per call."""
    seconds = cfg.minutes * 60.0
    pool = {it.call_id: it for it in items}

    def load(it: Item) -> tuple[FloatArray, int]:
        s = _seed(it.call_id, cfg.seed)
        x = sessions.render(it.files, seconds, s).audio
        noise = None
        if channel == "babble":
            others = sorted(k for k, o in pool.items() if o.label == it.label and k != it.call_id)
            order = sorted(others, key=lambda k: _seed(k, s))[: channels.BABBLE_TALKERS]
            if not order:
                raise ValueError("babble needs at least two sessions of a label")
            noise = sessions.babble([pool[k].files for k in order], seconds, s)
        return channels.apply(channel, x, s, noise), sessions.RATE

    return load


def _windows(outcome: CallOutcome) -> list[Window]:
    """The call's scored windows in time order, with their net speech where known."""
    speech = outcome.speech if len(outcome.speech) == len(outcome.scores) else []
    pairs = zip(outcome.scores, speech or [0.0] * len(outcome.scores), strict=True)
    return sorted((Window(t, sc, sp) for (t, sc), sp in pairs), key=lambda w: w.start_s)


def count_alerts(outcome: CallOutcome, rule: DimensionPolicy) -> int:
    """Alert episodes the policy raises over the call's scored windows, in time order."""
    return alerts_on(_windows(outcome), rule)


def _alert_score(outcome: CallOutcome, rule: DimensionPolicy) -> float:
    return alert_score(_windows(outcome), rule)


def clopper_pearson(k: int, n: int, alpha: float = Z_ALPHA) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval for a binomial proportion k/n."""
    if n <= 0:
        return (0.0, 1.0)

    def cdf(p: float, upto: int) -> float:
        if p <= 0.0 or p >= 1.0:
            return 1.0 if p <= 0.0 else float(upto >= n)
        lc = math.lgamma(n + 1)
        return sum(
            math.exp(
                lc
                - math.lgamma(i + 1)
                - math.lgamma(n - i + 1)
                + i * math.log(p)
                + (n - i) * math.log1p(-p)
            )
            for i in range(upto + 1)
        )

    lo = 0.0 if k == 0 else _bisect(lambda p: 1 - cdf(p, k - 1) - alpha / 2, increasing=True)
    hi = 1.0 if k == n else _bisect(lambda p: cdf(p, k) - alpha / 2, increasing=False)
    return lo, hi


def poisson_upper(k: int, alpha: float = Z_ALPHA) -> float:
    """Exact upper (1 - alpha/2) bound on a Poisson mean after observing k events."""

    def cdf(mu: float) -> float:
        if mu <= 0.0:
            return 1.0
        return sum(math.exp(-mu + i * math.log(mu) - math.lgamma(i + 1)) for i in range(k + 1))

    return _bisect(lambda mu: cdf(mu) - alpha / 2, increasing=False, hi=10.0 * k + 20.0)


def _bisect(f: Callable[[float], float], *, increasing: bool, hi: float = 1.0) -> float:
    lo_, hi_ = 0.0, hi
    for _ in range(100):
        mid = (lo_ + hi_) / 2
        if (f(mid) < 0) == increasing:
            lo_ = mid
        else:
            hi_ = mid
    return (lo_ + hi_) / 2


def tally(
    items: Sequence[Item],
    outcomes: dict[str, CallOutcome],
    rule: DimensionPolicy,
    minutes: float,
) -> dict[str, Any]:
    """Per-call alert counts under ``rule`` summed into the report's figures."""
    gen = [it for it in items if it.label == "bonafide"]
    spf = [it for it in items if it.label == "spoof"]
    counts = {it.call_id: count_alerts(outcomes[it.call_id], rule) for it in items}
    alerts = sum(counts[it.call_id] for it in gen)
    alerted = sum(counts[it.call_id] > 0 for it in gen)
    hours = len(gen) * minutes / 60.0
    missed = sum(counts[it.call_id] == 0 for it in spf)
    _, call_hi = clopper_pearson(alerted, len(gen))
    miss_lo, miss_hi = clopper_pearson(missed, len(spf))
    windows = sum(len(outcomes[it.call_id].scores) for it in gen)
    # in-sample: the lowest threshold (same N-of-M) at which no genuine session alerts
    # and the miss rate there; chosen on these very calls, so optimistic
    top = {it.call_id: _alert_score(outcomes[it.call_id], rule) for it in items}
    gen_top = max((top[it.call_id] for it in gen), default=-math.inf)
    missed_above = sum(top[it.call_id] <= gen_top for it in spf)
    return {
        "threshold": rule.threshold,
        "n_of_m": [rule.n, rule.m],
        "max_alerts_per_call": rule.max_alerts_per_call,
        "genuine_calls": len(gen),
        "call_hours": hours,
        "genuine_scored_windows": windows,
        "false_alerts": alerts,
        "genuine_calls_alerted": alerted,
        "false_alerts_per_1000_calls": 1000.0 * alerts / len(gen) if gen else None,
        "calls_alerted_per_1000_upper95": 1000.0 * call_hi if gen else None,
        "false_alerts_per_call_hour": alerts / hours if hours else None,
        "false_alerts_per_call_hour_upper95": poisson_upper(alerts) / hours if hours else None,
        "spoof_calls": len(spf),
        "spoof_missed": missed,
        "miss_rate": missed / len(spf) if spf else None,
        "miss_rate_ci95": [miss_lo, miss_hi] if spf else None,
        "genuine_max_alert_score": gen_top if gen else None,
        "miss_rate_above_it": missed_above / len(spf) if spf else None,
        "fusion_alerted_calls": sum(outcomes[it.call_id].alerted for it in items),
        "policy_sim_alerted_calls": sum(c > 0 for c in counts.values()),
        "per_call": {k: v for k, v in sorted(counts.items()) if v},
    }


def evaluate_sessions(
    detectors: Sequence[Detector],
    rules: dict[str, dict[str, DimensionPolicy]],
    items: Sequence[Item],
    policy: Policy,
    cfg: SessionConfig,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """detector -> rule name -> channel -> ``tally``; ``rules[detector]`` names the rules
    to replay (e.g. the policy's and the model's own codec threshold)."""
    out: dict[str, dict[str, dict[str, Any]]] = {
        d.spec.name: {r: {} for r in rules[d.spec.name]} for d in detectors
    }
    for ch in cfg.channels:
        if ch not in channels.CHANNELS:
            raise ValueError(f"unknown channel {ch!r} (one of {', '.join(channels.CHANNELS)})")
        res = run_condition(
            "g711",
            detectors,
            items,
            policy=policy,
            seed=cfg.seed,
            audio=loader(ch, items, cfg),
            progress=_prefixed(progress, ch),
        )
        for d in detectors:
            for rname, rule in rules[d.spec.name].items():
                out[d.spec.name][rname][ch] = tally(items, res[d.spec.name], rule, cfg.minutes)
    return out


def _prefixed(progress: Callable[[str], None] | None, prefix: str) -> Callable[[str], None] | None:
    if progress is None:
        return None
    report = progress
    return lambda msg: report(f"{prefix} {msg}")


def format_text(report: dict[str, Any]) -> str:
    lines = [
        f"sessions: {report['sessions']['genuine']} genuine / {report['sessions']['spoof']} "
        f"spoof, {report['minutes']} min each, policy {report['policy_version']}"
    ]
    for det in report["detectors"]:
        for rname, per in det["rules"].items():
            lines.append(f"{det['name']} [{rname}]")
            lines.append(
                "  channel          calls  hours  alerts  /1000 (95% up)   /hour (95% up)  miss"
            )
            for ch, r in per.items():
                miss = "-" if r["miss_rate"] is None else f"{100 * r['miss_rate']:.0f} %"
                lines.append(
                    f"  {ch:<15} {r['genuine_calls']:>6} {r['call_hours']:>6.2f} "
                    f"{r['false_alerts']:>7} {r['false_alerts_per_1000_calls']:>6.0f} "
                    f"({r['calls_alerted_per_1000_upper95']:>5.0f})  "
                    f"{r['false_alerts_per_call_hour']:>6.2f} "
                    f"({r['false_alerts_per_call_hour_upper95']:>5.2f})  {miss}"
                )
    return "\n".join(lines)
