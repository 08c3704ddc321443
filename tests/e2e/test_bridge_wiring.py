"""The bridge's wiring without the heavy path: admission under no capacity (plain SIP
refused with 503 + Retry-After, SIPREC answered and marked unanalysed, with a coverage
record), what the log says when no models are installed, fixture models in the models
directory never loaded silently, and the real command with ``--dev-fixture-models``
reporting ready on ``--http-listen``."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from bridge_runner import load_speech, run_sipp, wait_for
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import CallEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from detectors.fixture_models import vad_fixture
from detectors.model_store import ModelSettings, ModelStore
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring, load_detectors


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except OSError:
        return 0, b""


def test_fixture_models_in_the_models_dir_are_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, manifest = vad_fixture()
    ModelStore(tmp_path).add_built(data, manifest)
    with caplog.at_level(logging.WARNING, "sip_bridge.wiring"):
        assert load_detectors(ModelSettings(models_dir=tmp_path)) == []
    text = caplog.text
    assert "runtime test fixture, not a detector" in text
    assert text.count("no detector models installed") == 1


def test_no_capacity_refuses_sip_and_marks_siprec(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    base = 39400 + (time.monotonic_ns() // 1000 % 20) * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "127.0.0.1:0",
            "api_listen": "127.0.0.1:0",
            "max_analysed_calls": 0,
            "retry_after_s": 7,
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "none"))
    bridge = InProcessBridge(bridge_settings, wiring)
    bridge.start()
    try:
        assert wiring.http is not None
        host, port = wiring.http.address
        status, body = _get(f"http://{host}:{port}/ready")
        assert status == 200, body
        assert json.loads(body)["checks"]["redis"] is True
        assert _get(f"http://{host}:{port}/health")[0] == 200
        (tmp_path / "sip").mkdir()
        write_rtp_pcap(tmp_path / "sip" / "speech.pcap", load_speech(shared_dir, 0.5), ssrc=1)
        refused = run_sipp("uac_call.xml", bridge, tmp_path / "sip", timeout=10)  # type: ignore[arg-type]
        assert refused.returncode != 0
        stats = bridge.bridge.uas.stats
        assert stats["sent.503"] == 1 and stats["sent.200"] == 0
        (tmp_path / "rec").mkdir()
        write_rtp_pcap(tmp_path / "rec" / "speech.pcap", load_speech(shared_dir, 1.0), ssrc=2)
        answered = run_sipp(
            "uac_siprec.xml",
            bridge,
            tmp_path / "rec",
            extra=["-set", "port2", "9"],  # type: ignore[arg-type]
        )
        assert answered.returncode == 0, answered.stderr[-2000:]
        keys = Keys(settings.key_prefix)

        def events() -> list[CallEvent]:
            return [
                m for _, f in client.xrange(keys.events) if isinstance(m := decode(f), CallEvent)
            ]

        assert wait_for(lambda: [e.event for e in events()] == ["started", "ended"], 10)
    finally:
        bridge.stop()
    started, ended = events()
    assert started.reason == "unanalyzed:capacity"
    assert ended.coverage is not None
    assert not ended.coverage.analysed and ended.coverage.unanalyzed == "capacity"
    assert ended.coverage.dimensions == {}
    assert client.xlen(keys.scores) == 0


def test_the_command_reports_ready_with_dev_fixture_models(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path / "redis", port=free_port())
    try:
        server.start()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    http_port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "CALLSHIELD_STATE_DIR": str(tmp_path / "state"),
        "CALLSHIELD_MODELS_DIR": str(tmp_path / "models"),
        "CALLSHIELD_ADMISSION_SEED_MARGIN": "1.5",
    }
    cmd = [sys.executable, "-m", "sip_bridge.cli", "bridge", "--sip-listen", "127.0.0.1:0"]
    cmd += ["--rtp-ports", "39800-39819", "--http-listen", f"127.0.0.1:{http_port}"]
    cmd += ["--dev-fixture-models"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{http_port}"
        assert wait_for(lambda: _get(url + "/ready")[0] == 200 or proc.poll() is not None, 60)
        assert proc.poll() is None
        status, body = _get(url + "/metrics")
        assert status == 200 and b"callshield_detectors_ready 1.0" in body
        # admission's estimate before any call: seeded by the pre-warm timings
        capacity = json.loads(_get(url + "/ready")[1])["capacity"]
        seeded = capacity["seeded"]
        assert isinstance(seeded, int) and seeded > 0
        assert capacity["seed_margin"] == 1.5  # CALLSHIELD_ADMISSION_SEED_MARGIN
        assert f"callshield_capacity_seeded_calls {float(seeded)}".encode() in body
        assert _get(url + "/health")[0] == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        server.stop()
    log = out.decode()
    assert proc.returncode == 0, log[-3000:]
    assert "no detector models installed" in log
    assert "--dev-fixture-models: loaded tiny fixture models" in log
