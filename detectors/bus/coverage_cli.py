"""``callshield coverage --since 24h [--json]``: which of the calls that ended in a time
span were actually analysed, per dimension (``detectors.bus.coverage_report``).

Reads the events stream of Redis (``REDIS_URL`` or the embedded server); what counts
as covered follows ``CALLSHIELD_COVERAGE_MIN_SPEECH_S`` unless ``--min-speech`` says.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="coverage of ended calls: covered ratio per dimension, no-media, shed"
    )
    parser.add_argument("--since", default="24h", help="span: 90s, 30m, 24h, 7d (default 24h)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--min-speech", type=float, help="net speech seconds that count as covered (all dimensions)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import redis

    from detectors.bus.connect import resolve_url, sync_client
    from detectors.bus.coverage_objective import CoverageRule
    from detectors.bus.coverage_report import parse_span, read_ended, render_text, summarise
    from detectors.bus.keys import Keys
    from detectors.bus.settings import BusSettings

    try:
        since_s = parse_span(args.since)
    except ValueError as exc:
        print(f"callshield coverage: {exc}", file=sys.stderr)
        return 2
    settings = BusSettings()
    rule = CoverageRule.from_settings(settings)
    if args.min_speech is not None:
        if args.min_speech < 0:
            print("callshield coverage: --min-speech must be >= 0", file=sys.stderr)
            return 2
        rule = CoverageRule(args.min_speech, {})
    client = sync_client(settings, resolve_url(settings))
    try:
        sec, usec = client.time()  # the stream ids are the server's clock
        events, bad = read_ended(
            client, Keys(settings.key_prefix), since_s, sec * 1000 + usec // 1000
        )
    except redis.RedisError as exc:
        print(f"callshield coverage: redis unavailable: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    report = summarise(events, rule, since_s, bad)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(report, args.since))
    return 0
