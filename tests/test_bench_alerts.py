"""`callshield bench alerts --tiny --json`: a real redis-server, a real `callshield
webhooks run` process, the real publisher and three real receivers (fast, slow, flaky);
the baseline (direct POST) and both dispatcher phases (steady, Redis kill -9 half way)
have their latency distributions, and no alert revision is lost at any receiver."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_alerts_tiny_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "bench", "alerts", "--tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["benchmark"] == "alerts"
    assert result["setup"]["endpoints"] == {"fast": 1, "slow": 1, "flaky": 1}
    base = result["baseline_direct_post"]
    assert base["alerts"] == 60 and base["lost"] == 0 and base["latency"]["n"] == 60
    for phase in ("dispatcher", "redis_restart"):
        figures = result[phase]
        published = figures["alerts_published"]
        assert published == 60
        assert figures["publish_to_redis"]["n"] == published
        assert figures["lost"] == 0 and figures["dead"] == 0
        assert figures["order_violations"] == 0
        for ep in figures["endpoints"]:
            assert ep["bad_signatures"] == 0
            # delivered, or (flaky, four 503s in a row) queued for the durable lane
            assert ep["delivered"] + ep["queued"] == published, ep
            if phase == "dispatcher":  # (a kill -9 may take the attempt log's last second)
                assert ep["attempts"] >= ep["delivered"]
            latency = ep["latency"]
            assert latency["n"] == ep["delivered"]
            assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
        flaky = next(ep for ep in figures["endpoints"] if ep["kind"] == "flaky")
        assert flaky["failed_attempts"] > 0  # 503s, retried
    summary = result["summary"]
    assert set(summary) >= {"fast_p99_ms", "baseline_p99_ms", "ratio_p99", "retries"}
    assert summary["lost"] == 0 and summary["lost_across_redis_restart"] == 0
