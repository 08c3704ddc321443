"""`callshield bench alert-latency --tiny --json`: a real bridge (tiny fixture models)
and its own redis-server; every marked utterance raised an alert whose Redis time follows
the marker's onset, under load (calls started staggered, the default) and in the
single-call baseline, each one measured from the utterance's last packet with its
stages, and every policy change reached the bridge; ``--trace`` writes each call's
window timeline, relative to its utterance end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_alert_latency_tiny_json(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    cmd = [sys.executable, "-m", "sip_bridge.cli", "bench", "alert-latency", "--tiny", "--json"]
    out = subprocess.run(
        [*cmd, "--trace", str(trace)],
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
    # the trace: every analysed call's windows, the alert's among them, and the bank's
    # utterance end where the marked utterance ended
    timelines = json.loads(trace.read_text())
    assert [t["kind"] for t in timelines] == ["load", "load", "baseline"]
    for t in timelines:
        ends = [w["end"] for w in t["windows"]]
        assert ends == sorted(ends) and t["utterance_end_leg_s"] > 0
        assert all(w["cut"] in ("grid", "utterance_end") for w in t["windows"])
        assert all((w["score"] is None) != (w["abstained"] is None) for w in t["windows"])
        assert abs(t["noted_ends"][-1]) <= 0.1
        hit = next(w for w in t["windows"] if w["end"] == t["alert_window_end"])
        assert hit["score"] >= hit["threshold"] and t["alert_ms"] is not None
