"""``callshield redis``: the embedded Redis (start, stop, status) and alert retention."""

from __future__ import annotations

import argparse
from typing import Any

from detectors.bus.settings import BusSettings


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="the embedded Redis (no REDIS_URL) and alert-stream retention"
    )
    parser.add_argument("action", choices=("start", "stop", "status", "trim"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from detectors.bus.connect import resolve_url, sync_client
    from detectors.bus.embedded import EmbeddedRedis
    from detectors.bus.keys import Keys
    from detectors.bus.retention import trim_alerts

    settings = BusSettings()
    if args.action in ("start", "stop") and not settings.embedded:
        print("REDIS_URL is set: CallShield does not manage that server")
        return 1
    embedded = EmbeddedRedis(settings)
    if args.action == "start":
        print(embedded.ensure())
    elif args.action == "stop":
        print("stopped" if embedded.shutdown() else "not running")
    elif args.action == "status":
        if settings.embedded and not embedded.server.ping():
            print("embedded redis-server not running")
            return 1
        info = sync_client(settings, resolve_url(settings)).info("server")
        print(f"redis {info['redis_version']} up {info['uptime_in_seconds']} s")
    else:
        keys = Keys(settings.key_prefix)
        removed = trim_alerts(sync_client(settings), keys, settings.alerts_retention_days)
        print(f"trimmed {removed} alert entries")
    return 0
