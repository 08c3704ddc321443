"""The node status summary through the real code path: a wired bridge (tiny fixture
models, a real redis-server) takes a SIPREC call from SIPp; its heartbeat thread writes
``nodestatus:<node>`` beside the heartbeat with the models' versions, providers and
latency quantiles, live calls against capacity and the summed jitter-buffer counters;
draining shows as the state."""

from __future__ import annotations

import time
from pathlib import Path

import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.bus.keys import Keys
from detectors.bus.node_status import NodeStatus, histogram_quantile
from detectors.bus.settings import BusSettings
from detectors.metrics import DetectorMetrics
from detectors.model_store import ModelSettings
from sip_bridge.analysis import JB_SUM_FIELDS
from sip_bridge.node_status import LatencyWindow, latencies
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


def _status(client: redis.Redis, keys: Keys, node: str) -> NodeStatus | None:
    raw = client.get(keys.node_status(node))
    return None if raw is None else NodeStatus.model_validate_json(raw)


def test_heartbeat_carries_the_node_status(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    base = 39700 + (time.monotonic_ns() // 1000 % 20) * 10
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 9}",
            "drain_timeout_s": 3.0,
            "rtp_timeout_s": 1.0,
            "max_analysed_calls": 3,
            "dev_fixture_models": "tiny",
        }
    )
    bus = settings.model_copy(update={"node_id": "edge-7", "node_heartbeat_s": 0.2})
    wiring = Wiring(bridge_settings, bus, ModelSettings(models_dir=tmp_path / "no-models"))
    bridge = InProcessBridge(bridge_settings, wiring)
    keys = Keys(bus.key_prefix)
    bridge.start()
    try:
        ready = _status(client, keys, "edge-7")
        assert ready is not None and ready.boot == wiring.bus.boot
        assert client.get(keys.node("edge-7")) == wiring.bus.boot.encode()
        assert client.pttl(keys.node_status("edge-7")) > 0  # expires with the heartbeat
        assert ready.capacity == 3 and ready.live_calls == 0
        names = {d.spec.name: d for d in wiring.detectors}
        assert {m.name for m in ready.models} == set(names) and names
        for m in ready.models:
            assert m.version == names[m.name].spec.version
            assert m.provider == names[m.name].provider
        (tmp_path / "rec").mkdir()
        write_rtp_pcap(tmp_path / "rec" / "speech.pcap", load_speech(shared_dir, 3.0), ssrc=9)
        extra = ["-set", "port2", str(free_udp_port())]
        call = run_sipp("uac_siprec.xml", bridge, tmp_path / "rec", extra=extra)  # type: ignore[arg-type]
        assert call.returncode == 0, call.stderr[-2000:]

        def timed() -> NodeStatus | None:
            s = _status(client, keys, "edge-7")
            return s if s is not None and any(m.windows for m in s.models) else None

        assert wait_for(lambda: timed() is not None, 20)
        after = timed()
        assert after is not None and after.state == "ready"
        for m in after.models:
            if m.windows:
                assert m.p50_ms is not None and m.p99_ms is not None
                assert 0 < m.p50_ms <= m.p99_ms
        assert set(after.jitter) == set(JB_SUM_FIELDS)
        assert sum(after.jitter.values()) > 0  # the call's packets, summed over its legs
        bridge.loop.call_soon_threadsafe(setattr, bridge.bridge.controller, "draining", True)
        assert wait_for(
            lambda: getattr(_status(client, keys, "edge-7"), "state", "") == "draining", 5
        )
    finally:
        bridge.stop()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_latency_covers_about_the_last_minute() -> None:
    """An hour of fast windows, then a slow minute: the summary's quantiles are the
    minute's, not diluted by the hour (the since-start count still has them all)."""
    metrics, clock = DetectorMetrics(), _Clock()
    window = LatencyWindow(60.0, clock)
    fast = metrics.window_seconds.labels("aasist", "cpu")

    def beat(observations: list[float]) -> tuple[dict[str, float], float]:
        for v in observations:
            fast.observe(v)
        clock.now += 5.0
        recent, covered = window.recent(latencies(metrics))
        (buckets,) = recent.values()
        return {"n": buckets[-1][1]}, covered

    for _ in range(720):  # an hour of heartbeats, 100 windows of 3 ms each
        beat([0.003] * 100)
    for _ in range(12):  # then a minute of 400 ms windows
        got, covered = beat([0.4] * 100)
    assert covered == 60.0 and got["n"] == 1200
    recent, _ = window.recent(latencies(metrics))
    (buckets,) = recent.values()
    p50 = histogram_quantile(0.5, buckets)
    assert p50 is not None and 0.25 < p50 <= 0.5  # the slow minute's bucket
    assert latencies(metrics)[("aasist", "cpu")][-1][1] == 73_200  # since start
