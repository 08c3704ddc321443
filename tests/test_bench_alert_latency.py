"""`callshield bench alert-latency --tiny --json`: a real bridge (tiny fixture models)
and its own redis-server; every marked call raised an alert whose Redis time follows
the marker's onset, under load and in the single-call baseline, and every policy change
reached the bridge."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_alert_latency_tiny_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "bench", "alert-latency", "--tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["benchmark"] == "alert-latency"
    load, base = result["load"], result["baseline_single_call"]
    assert (load["calls"], load["no_alert"], load["latency"]["n"]) == (2, 0, 2)
    assert (base["calls"], base["no_alert"], base["latency"]["n"]) == (1, 0, 1)
    for dist in (load["latency"], base["latency"]):
        assert dist["unit"] == "ms" and dist["p50"] > 0  # the alert follows the onset
    assert result["policy_reload_reach"]["n"] == 5
    assert set(result["summary"]) >= {"load_p50_ms", "baseline_p50_ms", "ratio_p50"}
