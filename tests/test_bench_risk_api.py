"""`callshield bench risk-api --tiny --json`: a real redis-server, a real dashboard
process and the real publisher; the result has both paths' distributions and the floor,
and every request of the risk path found its call (status 200)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_risk_api_tiny_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "bench", "risk-api", "--tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["benchmark"] == "risk-api"
    risk, base = result["risk_by_external_id"], result["baseline_call_detail"]
    assert risk["errors"] == 0 and base["errors"] == 0
    assert risk["latency"]["n"] > 10 and base["latency"]["n"] > 10
    for key in ("p50", "p99", "max"):
        assert risk["latency"][key] > 0
    assert result["floor_redis_get_hgetall"]["latency"]["n"] == 200
    assert set(result["summary"]) >= {"risk_p99_ms_at_offered_rate", "goal_met"}
    assert result["risk_saturation_closed_loop"]["errors"] == 0
