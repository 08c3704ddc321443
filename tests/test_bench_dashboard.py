"""`callshield bench dashboard --tiny --json`: a real redis-server, a real dashboard
process, the real publisher and live-feed WebSocket clients; both phases (one client,
then several) have their latency distributions, every client received every alert, and
the alert list answered."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_dashboard_tiny_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "bench", "dashboard", "--tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["benchmark"] == "dashboard"
    assert result["setup"]["clients"] == 4
    for phase, clients in (("baseline_one_client", 1), ("clients", 4)):
        figures = result[phase]
        published = figures["alerts_published"]
        assert figures["clients"] == clients and published == 30
        latency = figures["feed_latency"]
        assert latency["n"] == clients * published  # every client got every alert ...
        assert figures["loss"]["per_client_max"] == 0  # ... none lost, none dropped
        assert figures["loss"]["dropped_by_server"] == 0
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
        assert figures["alert_list"]["errors"] == 0 and figures["alert_list"]["latency"]["n"] > 0
    summary = result["summary"]
    assert set(summary) >= {"feed_p99_ms", "baseline_feed_p99_ms", "ratio_p99", "goal_met"}
    assert summary["max_client_loss"] == 0
