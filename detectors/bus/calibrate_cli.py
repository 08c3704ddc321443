"""``callshield calibrate --target-false-alerts-per-1000 X [--since 30d] [--dimension D]``:
per-dimension thresholds from stored scores and analysts' labels that meet a target
of false alerts per 1,000 genuine calls under the policy's N-of-M rule, with the miss
rate on labelled fraud beside each, and a policy JSON to apply (``PUT /api/v1/policy``
on the dashboard, or its what-if first). ``detectors.bus.calibration`` says which calls
count as genuine and which as fraud.

Reads Redis (``REDIS_URL`` or the embedded server) under the configured key prefix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from detectors.alert_schema import Dimension

_DEFAULT_DIMS = (Dimension.SYNTHETIC_VOICE, Dimension.REPLAY, Dimension.KNOWN_FRAUDSTER)


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="thresholds for a target false-alert rate, from stored scores and labels"
    )
    parser.add_argument(
        "--target-false-alerts-per-1000", type=float, required=True, dest="target", metavar="X"
    )
    parser.add_argument("--since", default="30d", help="span of stored scores (default 30d)")
    parser.add_argument(
        "--dimension",
        action="append",
        choices=[d.value for d in Dimension],
        help="dimension to calibrate (repeatable; default: synthetic_voice, replay, "
        "known_fraudster)",
    )
    parser.add_argument(
        "--unlabelled",
        choices=("exclude", "genuine"),
        default="exclude",
        help="calls that alerted but were never labelled (default: left out)",
    )
    parser.add_argument("--out", type=Path, help="write the calibrated policy JSON here")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.set_defaults(run=run)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def run(args: argparse.Namespace) -> int:
    import redis

    from detectors.bus.calibration import calibrate
    from detectors.bus.calibration_load import load
    from detectors.bus.connect import resolve_url, sync_client
    from detectors.bus.coverage_report import parse_span
    from detectors.bus.keys import Keys
    from detectors.bus.policy import Policy
    from detectors.bus.policy_sim import evaluate
    from detectors.bus.policy_store import read_policy
    from detectors.bus.settings import BusSettings

    try:
        since_s = parse_span(args.since)
    except ValueError as exc:
        print(f"callshield calibrate: {exc}", file=sys.stderr)
        return 2
    if args.target < 0:
        print("callshield calibrate: the target must be >= 0", file=sys.stderr)
        return 2
    dims = [Dimension(d) for d in args.dimension] if args.dimension else list(_DEFAULT_DIMS)
    settings = BusSettings()
    keys = Keys(settings.key_prefix)
    client = sync_client(settings, resolve_url(settings))
    try:
        stored = read_policy(client, keys) or Policy()
        data = load(client, keys, since_s, args.unlabelled)
    except redis.RedisError as exc:
        print(f"callshield calibrate: redis unavailable: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"callshield calibrate: the stored policy is unusable: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    body = stored.body()
    proposed, results = calibrate(data, body, args.target, dims)
    fraud = list(data.fraud.values())
    genuine = list(data.genuine.values())
    before = evaluate(body, genuine, fraud, dimensions=dims)
    after = evaluate(proposed, genuine, fraud, dimensions=dims)
    policy_json = proposed.model_dump(mode="json")
    report = {
        "target_false_alerts_per_1000": args.target,
        "since": args.since,
        "policy_version": stored.version,
        "data": data.counts(),
        "dimensions": [r.as_dict() for r in results],
        "overall": {"current": before.as_dict(), "calibrated": after.as_dict()},
        "policy": policy_json,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(policy_json, indent=2, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    _print(report, results, after, args)
    return 0


def _print(report: dict[str, Any], results: list[Any], after: Any, args: Any) -> None:
    d = report["data"]
    print(
        f"calls since {args.since}: {d['genuine_calls']} genuine, {d['fraud_calls']} fraud "
        f"(labelled), {d['unreviewed_calls_left_out']} unreviewed left out; "
        f"{d['scores_read']} scores read{' (truncated)' if d['truncated'] else ''}"
    )
    print(f"policy {report['policy_version']}, target {args.target} false alerts / 1,000")
    print(f"{'dimension':<18}{'threshold':>18}{'false/1000':>18}{'miss rate':>20}{'fraud':>7}")
    for r in results:
        reach = "" if r.reachable else "  (target not reachable)"
        print(
            f"{r.dimension.value:<18}{r.current_threshold:>8.3f} -> {r.threshold:<6.3f}"
            f"{_rate(r.current_false_alerts_per_1000):>8} -> {_rate(r.false_alerts_per_1000):<7}"
            f"{_pct(r.current_miss_rate):>9} -> {_pct(r.miss_rate):<8}{r.fraud_calls:>5}{reach}"
        )
    print(
        f"all dimensions: {_rate(after.false_alerts_per_1000)} false alerts / 1,000 genuine "
        f"calls, miss rate {_pct(after.miss_rate)}"
    )
    genuine = d["genuine_calls"]
    if args.target > 0 and genuine < 1000 / args.target:
        print(
            f"note: {genuine} genuine calls cannot show a rate of {args.target} per 1,000 "
            f"(at least {1000 / args.target:.0f} needed)"
        )
    if args.out is not None:
        print(f"policy written to {args.out} (apply: PUT /api/v1/policy, what-if first)")
