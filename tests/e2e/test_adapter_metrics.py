"""The ingress adapters' counters reach the wired bridge's /metrics: a refused Twilio
Media Streams upgrade (no signature), a refused WHIP offer (no token) and a refused
AudioSocket connection (unregistered UUID), each counted by reason on a real bridge;
and so do the native ingest's and the SIP UAS's own counters."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from pathlib import Path

import httpx
import pytest
import redis
import websockets.sync.client
from websockets.exceptions import InvalidStatus
from wired_bridge import InProcessBridge

from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = line[len(name) + 1 : line.index("}")]
            if ",".join(sorted(got.split(","))) == want:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in /metrics")


def test_adapter_refusals_are_counted_on_metrics(
    tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    base = 39800 + (time.monotonic_ns() // 1000 % 10) * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 2.0,
            "http_listen": "127.0.0.1:0",
            "api_listen": "127.0.0.1:0",
            "audiosocket_listen": "127.0.0.1:0",
            "audiosocket_allow": "127.0.0.0/8",
            "twilio_auth_token": "twilio-test-token",
            "whip_token": "whip-test-token",
            "control_api_token": "control-test-token",
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "none"))
    bridge = InProcessBridge(bridge_settings, wiring)
    bridge.start()
    try:
        api = bridge.bridge.api
        assert api is not None and wiring.http is not None
        host, port = api.address
        with pytest.raises(InvalidStatus) as refused:
            websockets.sync.client.connect(f"ws://{host}:{port}/v1/twilio/media", open_timeout=5)
        assert refused.value.response.status_code == 403
        r = httpx.post(
            f"http://{host}:{port}/v1/whip",
            content=b"v=0\r\n",
            headers={"Content-Type": "application/sdp"},
            timeout=5,
        )
        assert r.status_code == 401
        assert bridge.bridge.audiosocket is not None
        with socket.create_connection(bridge.bridge.audiosocket.address, timeout=5) as s:
            s.sendall(bytes([0x01, 0, 16]) + uuid.uuid4().bytes)  # a UUID nobody registered
            s.settimeout(5)
            assert s.recv(64) == b""  # closed by the bridge
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:  # not SIP at all
            u.sendto(b"\x00garbage\r\n\r\n", ("127.0.0.1", bridge.bridge.server.port))
        deadline = time.monotonic() + 5
        while bridge.bridge.uas.stats["received"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        mhost, mport = wiring.http.address
        with urllib.request.urlopen(f"http://{mhost}:{mport}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        bridge.stop()
    twilio = [ln for ln in text.splitlines() if 'adapter="twilio"' in ln and "refused" in ln]
    assert twilio and sum(float(ln.rsplit(" ", 1)[1]) for ln in twilio) == 1.0, twilio
    assert _metric(text, "callshield_adapter_live", adapter="whip") == 0.0
    assert (
        _metric(text, "callshield_adapter_requests_total", adapter="whip", outcome="unauthorized")
        == 1.0
    )
    sock = [ln for ln in text.splitlines() if 'adapter="audiosocket"' in ln and "refused" in ln]
    assert sock and sum(float(ln.rsplit(" ", 1)[1]) for ln in sock) == 1.0, sock
    # the ingest's and the SIP UAS's own counters are there too
    assert _metric(text, "callshield_sip_events_total", event="received") == 1.0
    assert "callshield_ingest_srtp_auth_failed_total 0.0" in text
    assert 'callshield_ingest_parse_errors_total{reason="short"} 0.0' in text
