"""``callshield bench all``: every benchmark in turn, one table beside its baselines.

Each benchmark runs as its own subprocess (``callshield bench NAME --json`` with the
short flags of ``suite_plan``), so one that fails, crashes or overruns its time limit is
reported as such and the rest still run. The machine (CPU model, cores, kernel, Python,
onnxruntime providers) and the load average before and after go into the JSON and the
table's header: on a shared box the absolute figures move, the same-run ratios much less.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sip_bridge.bench.suite_plan import PLANS, Plan
from sip_bridge.bench.suite_table import markdown, text_table

STDERR_TAIL = 1500  # characters of a failed bench's stderr kept in the report


def add_parser(bench_sub: Any) -> None:
    parser: argparse.ArgumentParser = bench_sub.add_parser(
        "all", help="every benchmark in turn (one subprocess each), one table with baselines"
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as one JSON document")
    out.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument(
        "--quick", action="store_true", help="each bench's smoke-test flags (~1-2 min in all)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=[p.name for p in PLANS], help="these benchmarks only"
    )
    parser.add_argument(
        "--skip", nargs="+", default=[], choices=[p.name for p in PLANS], help="leave these out"
    )
    parser.add_argument(
        "--extra-args",
        action="append",
        default=[],
        metavar="BENCH=ARGS",
        help="append ARGS (shell-quoted) to one bench's flags, e.g. srtp='--repeats 3'",
    )
    parser.add_argument(
        "--out", type=Path, help="also write the JSON report to this file (any output mode)"
    )
    parser.add_argument(
        "--timeout-s", type=float, help="each bench's time limit (default: its own, 2-6 min)"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="run nothing: print a saved report (--out) again, rows re-derived from its results",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.from_json is not None:
        report = rederive(json.loads(args.from_json.read_text()))
    else:
        extra = _parse_extra(args.extra_args)
        chosen = [p for p in PLANS if (not args.only or p.name in args.only)]
        chosen = [p for p in chosen if p.name not in args.skip]
        report = run_suite(
            chosen, args.quick, extra, progress=not args.json, timeout_s=args.timeout_s
        )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.markdown:
        print(markdown(report))
    else:
        print(text_table(report))
    return 0 if all(r["status"] == "ok" for r in report["results"]) else 1


def rederive(report: dict[str, Any]) -> dict[str, Any]:
    """A saved report's rows derived again from its stored results (the same run's
    figures through the current extractors)."""
    plans = {p.name: p for p in PLANS}
    for r in report["results"]:
        if r["status"] == "ok" and r["bench"] in plans:
            r["row"] = plans[r["bench"]].extract(r["result"]).as_dict()
    return report


def _parse_extra(items: list[str]) -> dict[str, list[str]]:
    names = {p.name for p in PLANS}
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep or name not in names:
            raise SystemExit(f"--extra-args {item!r}: expected BENCH=ARGS, BENCH one of {names}")
        out.setdefault(name, []).extend(shlex.split(rest))
    return out


def run_suite(
    plans: list[Plan],
    quick: bool,
    extra: dict[str, list[str]],
    progress: bool,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    results = []
    for plan in plans:
        if progress:
            print(f"[bench all] {plan.name} ...", file=sys.stderr, flush=True)
        result = run_one(plan, quick, extra.get(plan.name, []), timeout_s)
        if progress:
            print(
                f"[bench all] {plan.name}: {result['status']} in {result['seconds']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        results.append(result)
    host = machine()
    host["load_avg_before"] = [round(x, 2) for x in load_before]
    host["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "benchmark": "all",
        "mode": "quick" if quick else "full",
        "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "total_seconds": round(time.monotonic() - t0, 1),
        "machine": host,
        "results": results,
    }


def run_one(
    plan: Plan, quick: bool, extra: list[str], timeout_s: float | None = None
) -> dict[str, Any]:
    timeout = timeout_s or plan.timeout_s
    flags = [*(plan.quick if quick else plan.full), *extra]
    cmd = [sys.executable, "-m", "sip_bridge.cli", "bench", plan.name, "--json", *flags]
    out: dict[str, Any] = {
        "bench": plan.name,
        "measured": plan.measured,
        "baseline": plan.baseline,
        "goal": plan.goal,
        "command": "callshield bench " + shlex.join([plan.name, "--json", *flags]),
    }
    t0 = time.monotonic()
    # its own session: on overrun the whole group goes (a bench's redis-server, dashboard
    # or SIPp children too), not just the bench's own process
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stderr = _kill_group(proc)
            out.update(status="timeout", seconds=round(time.monotonic() - t0, 1))
            out["error"] = f"no result within {timeout:.0f} s; " + stderr[-STDERR_TAIL:]
            return out
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    out["seconds"] = round(time.monotonic() - t0, 1)
    if proc.returncode != 0:
        out.update(status="failed", returncode=proc.returncode)
        out["error"] = stderr[-STDERR_TAIL:].strip() or f"exit status {proc.returncode}"
        return out
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        out.update(status="failed", error=f"no JSON on stdout ({exc}): {stdout[-300:]}")
        return out
    doc.pop("machine", None)
    try:
        row = plan.extract(doc)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        out.update(status="failed", error=f"unexpected JSON shape: {exc!r}", result=doc)
        return out
    out.update(status="ok", row=row.as_dict(), result=doc)
    return out


def _kill_group(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the bench's process group; what it wrote to stderr (a child that left the
    group and still holds the pipe is not waited for beyond a few seconds)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=5)[1] or ""
    except subprocess.TimeoutExpired:
        return ""


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    host: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
    }
    try:
        import onnxruntime

        host["onnxruntime"] = onnxruntime.__version__
        host["onnxruntime_providers"] = list(onnxruntime.get_available_providers())
    except ImportError:
        host["onnxruntime"] = None
        host["onnxruntime_providers"] = []
    return host


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
