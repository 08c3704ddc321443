"""What ``bench all`` runs: per benchmark its short flags, its baseline, its goal (from the
issues), and how its JSON becomes one table row.

Budgets: the full flags keep the whole run near 10 minutes on the 2-core reference box
(each bench's own defaults are sized for a quiet box and take far longer in total); the
quick flags are the benches' smoke-test settings. Goals are judged from the bench's own
JSON where it reports them (``goal_met``, ``goals``); otherwise from the figures the issue
names, or not at all (``goal_met`` None: the issue states no number).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Doc = Mapping[str, Any]


@dataclass(frozen=True)
class Row:
    figures: str  # "p50 / p99 / p99.9 unit", or the bench's headline figures
    baseline_figures: str
    ratio: str
    goal_met: bool | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "figures": self.figures,
            "baseline_figures": self.baseline_figures,
            "ratio": self.ratio,
            "goal_met": self.goal_met,
            "note": self.note,
        }


@dataclass(frozen=True)
class Plan:
    name: str
    measured: str
    baseline: str
    goal: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    timeout_s: float
    extract: Callable[[Doc], Row]


def _num(x: Any) -> str:
    if x is None:
        return "-"
    x = float(x)
    if x != x:  # NaN
        return "-"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def trio(dist: Doc | None, unit: str | None = None) -> str:
    """'p50 / p99 / p99.9 unit' of a summarize() dict (p99.9 '-' under 1,000 samples)."""
    if not dist or not dist.get("n"):
        return "no samples"
    u = unit or dist.get("unit", "")
    return f"{_num(dist.get('p50'))} / {_num(dist.get('p99'))} / {_num(dist.get('p99.9'))} {u}"


def _x(a: Any, b: Any) -> str:
    """a/b as '×N', '-' when either is missing."""
    try:
        return f"×{float(a) / float(b):.2f}"
    except (TypeError, ValueError, ZeroDivisionError):
        return "-"


# ---- extractors: one bench's JSON -> one row -----------------------------------------------


def _jitter(d: Doc) -> Row:
    lat, sp = d["latency"], d["speedup"]
    typ = sp["typical_op"]
    return Row(
        figures=trio(lat["native_per_packet_c"]),
        baseline_figures=trio(lat["aiortc_per_packet"]),
        ratio=f"×{typ['aiortc_over_native_c']['p50']:.1f} in C, "
        f"×{typ['aiortc_over_native_python_call']['p50']:.1f} via Python call (typical op p50)",
        goal_met=bool(sp["goal_met_c"]),
        note=f"Python call: {trio(lat['native_per_packet_python_call'])}; goal judged in C on "
        f"typical op p50/p99/p99.9, Python-call goal met: {sp['goal_met_python_call']}",
    )


def _ingest(d: Doc) -> Row:
    """Judged on the bridge's default receiver (per-leg sockets, unpaced, io_uring): CPU
    ratio vs asyncio per leg, loss, and the issue's latency definition (arrival "stamped
    right after the syscall" -> in the buffer: ``processing``); the kernel-stamp latency
    (which adds the thread's wakeup delay) is printed beside it, and the note gives the
    best paced / shared-port ratios of the same run against both asyncio baselines."""
    goals = d["goals"]
    run = d["runs"][-1]
    name = "native_per_leg_uring" if "native_per_leg_uring" in run else "native_per_leg"
    native, base = run[name], run["asyncio_per_leg"]
    ratio = run["cpu_ratios"][f"asyncio_per_leg/{name}"]["receiver"]
    kernel, syscall = native["latency"], native["processing"]
    loss = native["app_loss"]
    p999 = syscall.get("p99.9")
    met = (
        ratio is not None
        and ratio >= goals["cpu_ratio_min"]
        and p999 is not None
        and p999 <= goals["p99_9_us_max"]
        and (run["offered_pps"] < 40000 or loss == goals["loss_at_40kpps"])
    )
    return Row(
        figures=f"syscall→buffer {trio(syscall, 'µs')}; kernel stamp→buffer "
        f"{trio(kernel, 'µs')}; {native['cpu_us_per_packet']:.2f} µs CPU/pkt",
        baseline_figures="send→callback "
        + trio(base["latency"], "µs")
        + f", {base['cpu_us_per_packet']:.2f} µs CPU/pkt",
        ratio=f"×{ratio:.1f} less CPU/pkt" if ratio else "-",
        goal_met=bool(met),
        note=f"{name} (the bridge's default): {run['offered_pps']} pps, loss {loss}, "
        f"background CPU {native['background_cpu_share']:.2f}; latency judged "
        "syscall→buffer (the issue's stamp), kernel stamp→buffer adds the wakeup delay"
        + _floor(native)
        + _ingest_alternatives(run)
        + _per_leg_ceiling(run),
    )


def _per_leg_ceiling(run: Doc) -> str:
    """'; per-leg kernel floor: N µs CPU/pkt, so at most ×c vs asyncio_per_leg': the bare
    per-leg receiver (received and dropped, nothing else) of the same run, where it ran."""
    bare = run.get("native_per_leg_uring_bare")
    ceiling = (run["cpu_ratios"].get("asyncio_per_leg/native_per_leg_uring_bare") or {}).get(
        "receiver"
    )
    if bare is None or not ceiling:
        return ""
    return (
        f"; per-leg kernel floor (native_per_leg_uring_bare) "
        f"{bare['cpu_us_per_packet']:.2f} µs CPU/pkt, so at most ×{ceiling:.1f} vs "
        "asyncio_per_leg for any receiver with a socket per leg here"
    )


def _ingest_alternatives(run: Doc) -> str:
    """'; best per-leg paced: NAME ×a vs asyncio_per_leg / ×b vs asyncio_shared, ...'
    and the same for the bench's own shared-port receivers and for the bridge's shared-port
    path (``bridge_shared*``: what ``callshield bridge`` runs with the shared RTP port on),
    from one run's ratios."""
    ratios = run["cpu_ratios"]
    parts = []
    for label, prefix in (
        ("per-leg paced", "native_per_leg"),
        ("shared port", "native_shared"),
        ("bridge shared port", "bridge_shared"),
    ):
        names = [
            n
            for n in run
            if n.startswith(prefix) and (label != "per-leg paced" or n.endswith("_paced"))
        ]
        scored = [(ratios.get(f"asyncio_per_leg/{n}", {}).get("receiver") or 0.0, n) for n in names]
        if not scored:
            continue
        _, best = max(scored)
        vs = " / ".join(
            f"×{ratios[f'{b}/{best}']['receiver']:.1f} vs {b}"
            for b in ("asyncio_per_leg", "asyncio_shared")
            if (ratios.get(f"{b}/{best}") or {}).get("receiver")
        )
        p999 = _num(run[best].get("processing", {}).get("p99.9"))
        floor = _floor(run[best])
        parts.append(f"best {label}: {best} {vs}, syscall→buffer p99.9 {p999} µs{floor}")
    return "; " + "; ".join(parts) if parts else ""


def _floor(r: Doc) -> str:
    """' (machine floor p99.9 N µs; a paced wakeup W µs CPU)': the bench's stall probe
    beside that receiver, or '' for a run that has none."""
    floor = r.get("machine_floor") or {}
    p999, wake = floor.get("p99.9"), floor.get("wake_cpu_us")
    if p999 is None:
        return ""
    cost = "" if wake is None else f"; a paced wakeup {_num(wake)} µs CPU"
    return f" (machine floor p99.9 {_num(p999)} µs{cost})"


def _capacity(d: Doc) -> Row:
    knee = int(d["knee_calls"])
    steps = d["steps"]
    at = next((s for s in reversed(steps) if s["calls"] <= knee), steps[0])
    first_bad = next((s for s in steps if not s["ok"]), None)
    # on a shared box tick lag fails first; the queue-wait-only knee says what the
    # detectors themselves sustained
    wait_ok = [s["calls"] for s in steps if not set(s["failed"]) - {"tick_lag_p99"}]
    bvu = d["batched_vs_unbatched"]
    batched = bvu.get(f"windows_per_s_batch_{bvu['batch']}")
    bad = (
        f"{first_bad['calls']} calls failed {', '.join(first_bad['failed'])}; " if first_bad else ""
    )
    return Row(
        figures=f"knee {knee} calls; queue wait {trio(at['queue_wait'], 'ms')} at "
        f"{at['calls']} calls, {_num(at['cpu_percent_per_call'])} % CPU/call",
        baseline_figures=f"{_num(bvu['windows_per_s_batch_1'])} windows/s (batched "
        f"{bvu['batch']}: {_num(batched)})",
        ratio=f"×{_num(bvu['ratio'])} batched throughput",
        goal_met=knee >= 40,
        note=f"{bad}ignoring tick lag: {max(wait_ok, default=0)} calls; "
        f"models {d['config']['models_source']}, {d['provider']}",
    )


def _alert_latency(d: Doc) -> Row:
    s = d["summary"]
    p50, p99 = s.get("load_p50_ms"), s.get("load_p99_ms")
    calls = d["setup"]["concurrent_calls"]
    return Row(
        figures=f"{_num(p50)} / {_num(p99)} / {_num(s.get('load_p99.9_ms'))} ms at "
        f"{calls} concurrent calls",
        baseline_figures=f"{_num(s.get('baseline_p50_ms'))} / {_num(s.get('baseline_p99_ms'))} / "
        "- ms",
        ratio=_x(p50, s.get("baseline_p50_ms")) + " p50",
        goal_met=None if p50 is None or p99 is None else bool(p50 <= 250 and p99 <= 500),
        note=f"{d['load']['no_alert']} of {d['load']['calls']} calls no alert, "
        f"{d['load']['refused']} refused, arrivals "
        f"{d['setup'].get('arrivals', {}).get('mode', 'aligned')}",
    )


def _sip(d: Doc) -> Row:
    base = d["baseline"]
    steps = d["steps"]
    top = d["knee"] or steps[-1]  # the knee's step, else the last one run
    step = next((s for s in steps if s["rate"] == top["rate"]), steps[-1])
    degraded = d.get("first_degraded")
    return Row(
        figures=f"{_num(step['rate'])} calls/s: setup {trio(step['sip']['setup_ms'], 'ms')}, "
        f"loss {_num(step['frames']['loss_ratio'])}",
        baseline_figures=f"{_num(base['rate'])} calls/s: setup {_num(base['setup_ms_p50'])} / "
        f"{_num(base['setup_ms_p99'])} / - ms",
        ratio=_x(step["sip"]["setup_ms"].get("p99"), base["setup_ms_p99"]) + " setup p99",
        goal_met=None,
        note=f"knee {d['knee']['rate'] if d['knee'] else 'none'} calls/s; first degraded: "
        + (f"{degraded['rate']}/s {', '.join(degraded['degraded'])}" if degraded else "none"),
    )


def _webrtc(d: Doc) -> Row:
    nat, ai = d["native"], d["aiortc"]
    return Row(
        figures=f"loop lag {trio(nat['loop_lag_ms'], 'ms')}",
        baseline_figures=trio(ai["loop_lag_ms"], "ms"),
        ratio=_x(nat["loop_lag_ms"].get("p99"), ai["loop_lag_ms"].get("p99")) + " p99",
        goal_met=None,
        note=f"{d['config']['publishers']} publishers, frame loss "
        f"{_num(nat['frame_loss'])} vs {_num(ai['frame_loss'])}",
    )


def _alerts(d: Doc) -> Row:
    s = d["summary"]
    fast = d["dispatcher"]["latency_by_kind"].get("fast", {})
    return Row(
        figures=trio(fast, "ms") + f", {_num(s['throughput_deliveries_per_s'])} deliveries/s",
        baseline_figures=trio(d["baseline_direct_post"]["latency"], "ms"),
        ratio=f"×{_num(s.get('ratio_p99'))} p99",
        goal_met=s.get("lost") == 0,
        note=f"lost {s.get('lost')} (across Redis restart: {s.get('lost_across_redis_restart')})",
    )


def _dashboard(d: Doc) -> Row:
    s = d["summary"]
    loaded = d["clients"]["feed_latency"]
    shown = s.get("browser_shown_p99_ms")
    return Row(
        figures=trio(loaded, "ms") + f" to {d['setup']['clients']} sockets",
        baseline_figures=trio(d["baseline_one_client"]["feed_latency"], "ms") + " to 1 socket",
        ratio=f"×{_num(s.get('ratio_p99'))} p99",
        goal_met=bool(s["goal_met"]),
        note=f"browser shown p99 {_num(shown)} ms, max loss {s.get('max_client_loss')}",
    )


def _risk_api(d: Doc) -> Row:
    s = d["summary"]
    rate = d["setup"]["offered_per_s"]
    return Row(
        figures=trio(d["risk_by_external_id"]["latency"], "ms") + f" at {_num(rate)}/s",
        baseline_figures=f"{_num(s['baseline_max_per_s'])}/s, p99 "
        f"{_num(s['baseline_p99_ms_saturated'])} ms saturated",
        ratio=_x(s["risk_max_per_s"], s["baseline_max_per_s"]) + " saturated lookups/s",
        goal_met=bool(s["goal_met"]),
        note=f"risk saturated {_num(s['risk_max_per_s'])}/s, p99 "
        f"{_num(s['risk_p99_ms_saturated'])} ms",
    )


def _srtp(d: Doc) -> Row:
    per = d["per_packet"]
    suite = per["AES_CM_128_HMAC_SHA1_80"]
    return Row(
        figures=trio(suite),
        baseline_figures=trio(per["plain_rtp"]),
        ratio=_x(suite.get("p50"), per["plain_rtp"].get("p50")) + " p50",
        goal_met=None,
        note=f"GCM: {trio(per.get('AEAD_AES_128_GCM'))}",
    )


def _dtmf(d: Doc) -> Row:
    legs = max((k for k in d if k.startswith("legs_")), key=lambda k: int(k[5:]))
    r = d[legs]
    return Row(
        figures=trio(r["inband_dtmf_per_tick"]) + f" per tick, {legs[5:]} legs",
        baseline_figures=trio(r["baseline_tone_check_per_tick"]),
        ratio=_x(r["inband_dtmf_per_tick"].get("p50"), r["baseline_tone_check_per_tick"].get("p50"))
        + " p50",
        goal_met=None,
        note=f"false keys on speech {r['false_keys_on_speech']}",
    )


# the bridge's default receiver (per-leg, unpaced, io_uring) and its asyncio baseline,
# judged; paced per-leg and paced shared-port receivers and the shared-port asyncio
# baseline only for the note (what CALLSHIELD_INGEST_COALESCE_US / one port would buy),
# and the per-leg kernel floor (the ceiling of any per-leg receiver's ratio)
_INGEST_RX = (
    "--coalesce-us 1000 --receivers native_per_leg_uring native_per_leg_uring_paced "
    "native_per_leg_uring_bare native_shared_paced bridge_shared_paced asyncio_per_leg "
    "asyncio_shared"
)

PLANS: tuple[Plan, ...] = (
    Plan(
        "jitter",
        "jitter buffer insert + pull share, ns per packet (native, in C)",
        "aiortc JitterBuffer, same trace",
        "≥ 20× aiortc per packet (issue 2)",
        (),  # its defaults (a 60 s trace) take ~15 s
        ("--seconds", "3", "--no-warmup"),
        180,
        _jitter,
    ),
    Plan(
        "srtp",
        "SRTP unprotect + RTP parse, ns per packet (AES_CM_128_HMAC_SHA1_80)",
        "plain RTP parse",
        "none stated (cost beside plain RTP)",
        (),  # its defaults (20 s of speech, 10 repeats) take ~5 s
        ("--seconds", "3", "--repeats", "2"),
        120,
        _srtp,
    ),
    Plan(
        "dtmf",
        "in-band DTMF detection, µs per 20 ms tick",
        "plain tone-energy check",
        "none stated (no false keys on speech)",
        ("--legs", "1", "200", "--ticks", "1000"),
        ("--legs", "1", "50", "--ticks", "100"),
        120,
        _dtmf,
    ),
    Plan(
        "ingest",
        "RTP arrival to jitter buffer, µs (native per-leg sockets, io_uring, unpaced)",
        "asyncio DatagramProtocol",
        "≥ 4× less CPU/pkt, 0 loss at 40 kpps, p99.9 ≤ 50 µs (issue 2)",
        tuple(f"--pps 40000 --seconds 8 --warmup 2 {_INGEST_RX}".split()),
        tuple(f"--pps 5000 --seconds 2 --warmup 0.5 {_INGEST_RX}".split()),
        240,
        _ingest,
    ),
    Plan(
        "risk-api",
        "GET risk by external call id, open loop, ms",
        "call-detail view (stream scan), saturated",
        "p99 ≤ 20 ms (issue 12)",
        (),  # its defaults (10 s per path: a 5 s window is mostly the warm-up's queue)
        ("--tiny",),
        180,
        _risk_api,
    ),
    Plan(
        "alerts",
        "publish to webhook delivery (fast receiver), ms",
        "direct signed POST",
        "0 alerts lost across a Redis restart (issue 7)",
        ("--seconds", "8"),
        ("--tiny",),
        180,
        _alerts,
    ),
    Plan(
        "dashboard",
        "alert published to live feed, ms",
        "one client",
        "p99 ≤ 100 ms with 50 clients, no loss (issue 8)",
        ("--seconds", "6"),
        ("--tiny",),
        240,
        _dashboard,
    ),
    Plan(
        "webrtc",
        "event-loop lag with WHIP publishers, ms",
        "aiortc's own receiver path",
        "none stated (publishers sustained, lag p99, frame loss)",
        ("--seconds", "10"),
        ("--tiny",),
        240,
        _webrtc,
    ),
    Plan(
        "sip",
        "SIPp calls with RTP: setup latency, ms, and frame loss",
        "the first (lowest-rate) step",
        "none stated (report the knee)",
        ("--rates", "5,10,20,40", "--step-seconds", "6", "--hold", "2"),
        ("--tiny",),
        300,
        _sip,
    ),
    Plan(
        "alert-latency",
        "last RTP packet of a suspicious utterance to alert, ms",
        "a single call",
        "p50 ≤ 250 ms, p99 ≤ 500 ms at load (issue 5)",
        ("--rounds", "2"),
        ("--tiny",),
        300,
        _alert_latency,
    ),
    Plan(
        "capacity",
        "concurrent calls scored continuously (the knee)",
        "unbatched inference",
        "≥ 40 concurrent calls (issue 5)",
        ("--step-seconds", "6", "--max-calls", "48", "--keep-going"),
        ("--tiny", "--max-calls", "8", "--step-seconds", "3"),
        360,
        _capacity,
    ),
)
