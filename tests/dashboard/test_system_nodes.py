"""System health's bridge nodes: the real heartbeat writer (``NodeLiveness`` with a
status callable) against the dashboard's real redis-server; the API and the page show
each node's state, live calls against capacity, models with version, provider and
latency, and jitter-buffer counters; a node without a heartbeat is lost, a summary
of another boot is not shown, an unreadable one is skipped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import Dash

from detectors.bus.keys import Keys
from detectors.bus.liveness import NodeLiveness
from detectors.bus.node_status import ModelStatus, NodeStatus, histogram_quantile


def _status(dash: Dash, node: str, boot: str, state: str = "ready") -> NodeStatus:
    return NodeStatus(
        node_id=node,
        boot=boot,
        state=state,  # type: ignore[arg-type]
        at=datetime.fromtimestamp(dash.clock.now - 2, UTC),
        live_calls=5,
        analysed_calls=4,
        capacity=40,
        models=[
            ModelStatus(
                name="aasist-l",
                dimension="synthetic_voice",
                version="2.1.0",
                provider="cuda",
                windows=900,
                recent_windows=120,
                p50_ms=3.5,
                p99_ms=12.25,
            )
        ],
        jitter={"packets_received": 5000, "packets_late": 7, "concealment_events": 3},
    )


def _liveness(dash: Dash, node: str, boot: str, state: str = "ready") -> NodeLiveness:
    bus = dash.bus.model_copy(update={"node_id": node})
    return NodeLiveness(dash.redis, bus, boot, status=lambda: _status(dash, node, boot, state))


def test_nodes_from_the_heartbeat_on_api_and_page(dash: Dash) -> None:
    _liveness(dash, "edge-1", "boot-a").beat()
    draining = _liveness(dash, "edge-2", "boot-b", "draining")
    draining.beat()
    gone = _liveness(dash, "edge-3", "boot-c")
    gone.beat()
    gone.close()  # heartbeat dropped; still registered until reaped
    dash.login("viewer")
    nodes = {n["node_id"]: n for n in dash.client.get("/api/v1/system").json()["nodes"]}
    assert set(nodes) == {"edge-1", "edge-2", "edge-3"}
    one = nodes["edge-1"]
    assert one["state"] == "ready" and one["last_seen_s"] == 2.0
    assert one["status"]["capacity"] == 40 and one["status"]["live_calls"] == 5
    assert one["status"]["models"][0] == {
        "name": "aasist-l",
        "dimension": "synthetic_voice",
        "version": "2.1.0",
        "provider": "cuda",
        "windows": 900,
        "recent_windows": 120,
        "p50_ms": 3.5,
        "p99_ms": 12.25,
    }
    assert one["status"]["jitter"]["packets_late"] == 7
    assert nodes["edge-2"]["state"] == "draining"
    assert nodes["edge-3"]["state"] == "lost" and nodes["edge-3"]["status"] is None
    page = dash.client.get("/system").text
    title = page[page.index("<title>") : page.index("</title>")]
    assert "edge" not in title and page.index("<h1>System health") < page.index("edge-1")
    assert "edge-1" in page and "draining" in page and "lost" in page
    assert "GPU (cuda)" in page and "12.2 ms" in page and "4 / 40" in page
    assert "120 / 900" in page


def test_stale_and_unreadable_summaries_are_not_shown(dash: Dash) -> None:
    keys = Keys(dash.bus.key_prefix)
    _liveness(dash, "edge-1", "boot-old").beat()
    restarted = NodeLiveness(dash.redis, dash.bus.model_copy(update={"node_id": "edge-1"}), "new")
    restarted.beat()  # a bridge without a status writer took over the node id
    _liveness(dash, "edge-2", "boot-b").beat()
    dash.redis.set(keys.node_status("edge-2"), "{not json")
    dash.login("viewer")
    nodes = {n["node_id"]: n for n in dash.client.get("/api/v1/system").json()["nodes"]}
    assert nodes["edge-1"]["state"] == "unknown" and nodes["edge-1"]["status"] is None
    assert nodes["edge-2"]["state"] == "unknown" and nodes["edge-2"]["status"] is None


def test_a_failing_status_callable_keeps_the_heartbeat(dash: Dash) -> None:
    def broken() -> NodeStatus:
        raise RuntimeError("boom")

    keys = Keys(dash.bus.key_prefix)
    beat = NodeLiveness(
        dash.redis, dash.bus.model_copy(update={"node_id": "e"}), "b", status=broken
    )
    beat.beat()
    assert dash.redis.get(keys.node("e")) == b"b"
    assert dash.redis.get(keys.node_status("e")) is None
    assert beat.stats.status_errors == 1


def test_histogram_quantile() -> None:
    inf = float("inf")
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(0.01, 0.0), (inf, 0.0)]) is None
    buckets = [(0.001, 0.0), (0.005, 50.0), (0.01, 100.0), (inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == 0.005
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.003)  # halfway into (1 ms, 5 ms]
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.0099)
    assert histogram_quantile(0.99, [(0.01, 10.0), (inf, 100.0)]) == 0.01  # in +Inf
