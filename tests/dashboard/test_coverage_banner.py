"""The coverage banner: fed by the latest system coverage events the bridge's publisher
writes to Redis; shown while a dimension of a node is degraded, gone once it recovers."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import Dash

from detectors.alert_schema import CoverageStatus, Dimension, SystemEvent
from detectors.bus.publisher import AlertPublisher


def _event(kind: str, dim: Dimension, covered: int, node: str = "node-a") -> SystemEvent:
    return SystemEvent.model_validate(
        {
            "event_id": f"sys_{kind[-9:]}_{dim.value}_{node}",
            "type": kind,
            "node_id": node,
            "at": datetime.now(UTC),
            "coverage": CoverageStatus(
                dimension=dim,
                covered_ratio=covered / 50,
                objective=0.95,
                calls=50,
                covered_calls=covered,
                min_speech_s=2.0,
            ),
        }
    )


def _publish(dash: Dash, *events: SystemEvent) -> None:
    publisher = AlertPublisher(dash.redis, dash.bus)
    publisher.start()
    for e in events:
        publisher.publish_system(e)
    assert publisher.flush(10)
    publisher.close()


def test_banner_while_coverage_is_degraded(dash: Dash) -> None:
    dash.login("viewer")
    assert 'id="coverage-banner"' not in dash.client.get("/").text
    _publish(
        dash,
        _event("system.coverage.degraded", Dimension.SYNTHETIC_VOICE, 40),
        _event("system.coverage.degraded", Dimension.REPLAY, 45, node="node-b"),
    )
    for path in ("/", "/alerts", "/system"):
        page = dash.client.get(path).text
        assert 'id="coverage-banner"' in page, path
        said = "synthetic voice on node-a (40 of the last 50 calls analysed, objective 95 %)"
        assert said in page
        assert "replay on node-b (45 of the last 50" in page
    _publish(dash, _event("system.coverage.recovered", Dimension.SYNTHETIC_VOICE, 49))
    page = dash.client.get("/").text
    assert "synthetic voice on node-a" not in page and "replay on node-b" in page
    _publish(dash, _event("system.coverage.recovered", Dimension.REPLAY, 49, node="node-b"))
    assert 'id="coverage-banner"' not in dash.client.get("/").text
    dash.redis.hset("cs-test:system:state", "system.coverage:node-c:replay", "{not json")
    assert dash.client.get("/").status_code == 200  # an unreadable entry shows no banner
