"""`callshield bench dashboard --tiny --json`: a real redis-server, a real dashboard
process, the real publisher, live-feed WebSocket clients and one real headless Chromium
page on the alert queue; both phases (one client, then several) have their latency
distributions, every client received and the page showed every alert, the page's clock
is the publisher's, and the alert list answered."""

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
        browser = figures["browser"]
        assert browser["pages"] == 1  # one real page beside the sockets in both phases
        for path in ("received_latency", "dom_latency", "shown_latency"):
            assert browser[path]["n"] == published  # the page showed every alert ...
        assert browser["loss_per_page_max"] == 0
        recv, dom, shown = (
            browser[k] for k in ("received_latency", "dom_latency", "shown_latency")
        )
        assert 0 < recv["p50"] <= dom["p50"] <= shown["p50"]  # received, inserted, painted
        for when in ("start", "end"):
            (clock,) = browser["clock"][when]
            assert clock["visibility"] == "visible"  # a hidden page would not paint
            assert abs(clock["perf_offset_ms"]) <= clock["bound_ms"] + 5.0  # one clock
    rows = {(r["phase"], r["path"]): r for r in result["side_by_side"]}
    assert set(rows) == {
        (phase, path)
        for phase in ("baseline", "loaded")
        for path in ("socket_received", "browser_received", "browser_dom", "browser_shown")
    }
    assert rows[("loaded", "socket_received")]["n"] == 4 * 30
    assert rows[("loaded", "browser_shown")]["n"] == 30
    summary = result["summary"]
    assert set(summary) >= {"feed_p99_ms", "baseline_feed_p99_ms", "ratio_p99", "goal_met"}
    assert set(summary) >= {"browser_shown_p99_ms", "baseline_browser_shown_p99_ms"}
    assert summary["max_page_loss"] == 0
    assert summary["max_client_loss"] == 0
