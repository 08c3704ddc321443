"""`callshield bench alert-latency --tiny --json`: a real bridge (tiny fixture models)
and its own redis-server; every marked utterance raised an alert whose Redis time follows
the marker's onset, under load (calls started staggered, the default) and in the
single-call baseline, each one measured from the utterance's last packet with its
stages, and every policy change reached the bridge."""

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
    assert (load["calls"], load["no_alert"], load["from_onset"]["n"]) == (2, 0, 2)
    assert (base["calls"], base["no_alert"], base["from_onset"]["n"]) == (1, 0, 1)
    for part in (load, base):
        assert part["from_onset"]["unit"] == "ms" and part["from_onset"]["p50"] > 0
        end = part["from_utterance_end"]
        assert end["no_alert"] == 0 and end["latency"]["n"] == part["calls"]
        # every alert's window was found and its stages add up to the whole
        stages = end["stages"]
        assert {s["n"] for s in stages.values()} == {part["calls"]}
        total = sum(s["mean"] for s in stages.values())
        assert abs(total - end["latency"]["mean"]) < 1.0
    assert result["policy_reload_reach"]["n"] == 5
    # by default the load round's calls start spread over one voice-model hop
    arrivals = result["setup"]["arrivals"]
    assert arrivals["mode"] == "staggered" and arrivals["spread_from"].startswith("hop of ")
    assert 0 < arrivals["spread_s"] <= result["setup"]["lead_s"]
    assert len(load["first_packet_span_s"]) == 1
    assert [(r["refused"], r["no_alert"]) for r in load["per_round"]] == [(0, 0)]
    assert set(result["summary"]) >= {"load_p50_ms", "baseline_p50_ms", "ratio_p50"}
