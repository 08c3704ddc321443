"""``callshield bench <name>``: each benchmark prints distributions beside a baseline."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# benchmark name -> module exposing add_arguments(parser) and run(args) -> dict
BENCHMARKS: dict[str, str] = {
    "jitter": "sip_bridge.bench.jitter",
    "ingest": "sip_bridge.bench.ingest",
    "capacity": "sip_bridge.bench.capacity",
    "sip": "sip_bridge.bench.sip",
    "risk-api": "sip_bridge.bench.risk_api",
    "webrtc": "sip_bridge.bench.webrtc",
    "dashboard": "sip_bridge.bench.dashboard",
    "alert-latency": "sip_bridge.bench.alert_latency",
    "alerts": "sip_bridge.bench.alerts",
    "srtp": "sip_bridge.bench.srtp",
    "dtmf": "sip_bridge.bench.dtmf",
    "utterance-ends": "sip_bridge.bench.utterance_ends",
}


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="measure latency distributions and capacity on this machine"
    )
    bench_sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    bench_sub.required = True
    for bench_name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or bench_name).strip().splitlines()[0]
        bench_parser = bench_sub.add_parser(bench_name, help=summary)
        bench_parser.add_argument(
            "--json", action="store_true", help="print the result as one JSON document"
        )
        module.add_arguments(bench_parser)
        bench_parser.set_defaults(run=_make_runner(module))
    from sip_bridge.bench import suite  # `bench all`: every one above, one table

    suite.add_parser(bench_sub)


def _make_runner(module: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from sip_bridge.bench.report import emit

        result = module.run(args)
        emit(result, as_json=args.json)
        return 0

    return run
