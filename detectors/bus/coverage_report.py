"""``callshield coverage``'s reading side: the ``ended`` call events of a time span from
the events stream, summarised per dimension (the covered definition of
``detectors.bus.coverage_objective``), with no-media, one-way and shed calls,
abstention and unavailable reasons, and time to first packet.

The events stream is lossy and capped (``events_maxlen``): the report says how many
ended calls it found, and a span longer than the stream holds covers what is left.
An entry that does not parse is counted and skipped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from detectors.alert_schema import Abstention, CallEvent, Dimension
from detectors.bus.codec import decode
from detectors.bus.coverage_objective import CoverageRule
from detectors.bus.keys import Keys

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_span(text: str) -> float:
    """``90s``, ``30m``, ``24h``, ``7d`` -> seconds; ``ValueError`` otherwise."""
    m = _SPAN.match(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"a span looks like 90s, 30m, 24h or 7d, got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def read_ended(
    client: redis.Redis, keys: Keys, since_s: float, now_ms: int, page: int = 1000
) -> tuple[list[CallEvent], int]:
    """``ended`` events whose stream entry is newer than ``now_ms - since_s``, oldest
    first, and how many entries did not parse."""
    start = f"{max(0, now_ms - int(since_s * 1000))}-0"
    out: list[CallEvent] = []
    bad = 0
    while True:
        entries: Any = client.xrange(keys.events, min=start, max="+", count=page)
        for _, fields in entries:
            try:
                message = decode(fields)
            except ValueError:
                bad += 1
                continue
            if isinstance(message, CallEvent) and message.event == "ended":
                out.append(message)
        if len(entries) < page:
            return out, bad
        last = entries[-1][0]
        start = "(" + (last.decode() if isinstance(last, bytes) else str(last))


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class DimensionReport:
    covered: int = 0
    ratio: float = 0.0
    min_speech_s: float = 0.0
    analysed_speech_s: float = 0.0
    windows: int = 0
    scored_windows: int = 0
    abstentions: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, int] = field(default_factory=dict)


@dataclass
class CoverageReport:
    since_s: float
    calls: int = 0
    analysed: int = 0
    shed: dict[str, int] = field(default_factory=dict)  # unanalyzed reason -> calls
    no_media: int = 0
    one_way: int = 0
    ended: dict[str, int] = field(default_factory=dict)  # end reason -> calls
    silent_legs: dict[str, int] = field(default_factory=dict)  # leg role -> legs
    ttfp_legs: int = 0
    ttfp_p50_s: float | None = None
    ttfp_p99_s: float | None = None
    bad_entries: int = 0
    dimensions: dict[str, DimensionReport] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(
    events: list[CallEvent], rule: CoverageRule, since_s: float, bad_entries: int = 0
) -> CoverageReport:
    """Every dimension seen on any call is judged on every call (a call without it, or
    not analysed at all, is not covered for it)."""
    r = CoverageReport(since_s=since_s, calls=len(events), bad_entries=bad_entries)
    dims: set[Dimension] = set()
    shed: Counter[str] = Counter()
    ended: Counter[str] = Counter()
    silent: Counter[str] = Counter()
    ttfp: list[float] = []
    for e in events:
        ended[e.reason or "unknown"] += 1
        cov = e.coverage
        if cov is None:
            continue
        dims.update(cov.dimensions)
        r.analysed += cov.analysed
        if cov.unanalyzed:
            shed[cov.unanalyzed] += 1
        r.no_media += cov.media == "none"
        r.one_way += cov.media == "one_way"
        for leg in cov.legs.values():
            if leg.silent:
                silent[leg.role.value] += 1
            if leg.time_to_first_packet_s is not None:
                ttfp.append(leg.time_to_first_packet_s)
    for dim in sorted(dims):
        d = DimensionReport(min_speech_s=rule.min_speech(dim))
        abst: Counter[Abstention] = Counter()
        unav: Counter[str] = Counter()
        for e in events:
            d.covered += rule.covered(e.coverage, dim)
            got = e.coverage.dimensions.get(dim) if e.coverage is not None else None
            if got is not None:
                d.analysed_speech_s += got.analysed_speech_s
                d.windows += got.windows
                d.scored_windows += got.scored_windows
                abst.update(got.abstentions)
                unav.update(got.unavailable)
        d.ratio = d.covered / len(events) if events else 0.0
        d.analysed_speech_s = round(d.analysed_speech_s, 3)
        d.abstentions = {k.value: v for k, v in abst.most_common()}
        d.unavailable = dict(unav.most_common())
        r.dimensions[dim.value] = d
    r.shed, r.ended, r.silent_legs = dict(shed), dict(ended.most_common()), dict(silent)
    r.ttfp_legs = len(ttfp)
    r.ttfp_p50_s, r.ttfp_p99_s = percentile(ttfp, 50), percentile(ttfp, 99)
    return r


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in c.items()) or "-"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def render_text(r: CoverageReport, span: str) -> str:
    shed = sum(r.shed.values())
    lines = [
        f"coverage of calls ended in the last {span}: {r.calls} calls, {r.analysed} analysed, "
        f"{shed} shed ({_counts(r.shed)})",
        f"no media: {r.no_media}   one-way: {r.one_way}   silent legs: {_counts(r.silent_legs)}",
        f"time to first packet: p50 {_secs(r.ttfp_p50_s)}, p99 {_secs(r.ttfp_p99_s)} "
        f"({r.ttfp_legs} legs with media)",
        f"ended by reason: {_counts(r.ended)}",
    ]
    if r.bad_entries:
        lines.append(f"unreadable stream entries skipped: {r.bad_entries}")
    if not r.dimensions:
        lines.append("no dimension was analysed on these calls")
        return "\n".join(lines) + "\n"
    head = f"{'dimension':<16} {'covered':>9} {'ratio':>6} {'min s':>6} {'speech s':>9}"
    lines += ["", f"{head}  abstentions / unavailable"]
    for name, d in r.dimensions.items():
        lines.append(
            f"{name:<16} {d.covered:>4}/{r.calls:<4} {d.ratio:>6.3f} {d.min_speech_s:>6.1f} "
            f"{d.analysed_speech_s:>9.1f}  {_counts(d.abstentions)} / {_counts(d.unavailable)}"
        )
    return "\n".join(lines) + "\n"
