"""The ``callshield`` command.

Each subcommand lives in its own module and registers itself through ``add_parser``;
this file only wires them, importing just the module of the command that runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# subcommand -> module exposing add_parser(subparsers) and run(args) -> int
_COMMANDS: dict[str, str] = {
    "bench": "sip_bridge.bench.cli",
    "allowlist": "detectors.replay.allowlist_cli",
    "bridge": "sip_bridge.bridge",
    "calibrate": "detectors.bus.calibrate_cli",
    "coverage": "detectors.bus.coverage_cli",
    "dashboard": "dashboard.cli",
    "demo": "sip_bridge.demo",
    "eval": "detectors.eval.cli",
    "models": "detectors.models_cli",
    "schema": "detectors.bus.schema_export",
    "redis": "detectors.bus.redis_cli",
    "redis-acl": "detectors.bus.acl_cli",
    "replay": "sip_bridge.replay.cli",
    "watchlist": "detectors.speaker.watchlist_cli",
    "webhooks": "detectors.bus.webhooks.cli",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Only the module of the command being run is imported (so one command
    never pays for, or breaks on, another's dependencies); with no command named, or for
    --help, every command's module is loaded to list them."""
    parser = argparse.ArgumentParser(
        prog="callshield",
        description="Live-call deepfake and fraud detection for contact centers.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    args = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args if not a.startswith("-")), None)
    names = [chosen] if chosen in _COMMANDS else list(_COMMANDS)
    for name in names:
        module = importlib.import_module(_COMMANDS[name])
        module.add_parser(sub, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
