"""The whole media process with real parts: SIPp places SIPREC calls (real speech from a
pcap) into a bridge running the detector runtime on the dev fixture models, publishing
to a real redis-server. One call's external stream carries the synthetic-voice
fixture's 3.5 kHz marker, the other is genuine; both agent (internal) streams carry the
marker too, so scoring the internal leg would raise an alert. Bounded waits only."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import FRAME, write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import (
    Abstention,
    Alert,
    Band,
    CallEvent,
    Dimension,
    LegRole,
    ScoreUpdate,
    alert_id_for,
)
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ
from detectors.model_store import ModelSettings
from native.codec import ulaw_encode
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


def _marked(speech: npt.NDArray[np.int16], dbfs: float = -20.0) -> npt.NDArray[np.int16]:
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)


def _send_agent(port: int, audio: npt.NDArray[np.int16]) -> None:
    ulaw = ulaw_encode(audio)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        t0 = time.monotonic()
        for k in range(len(ulaw) // FRAME):
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            header = bytes([0x80, 0]) + (7000 + k).to_bytes(2, "big")
            header += (160 * k).to_bytes(4, "big") + (0xA6E17).to_bytes(4, "big")
            sock.sendto(header + ulaw[k * FRAME : (k + 1) * FRAME], ("127.0.0.1", port))


def _place_call(
    bridge: InProcessBridge,
    workdir: Path,
    external: npt.NDArray[np.int16],
    agent: npt.NDArray[np.int16],
) -> None:
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", external, ssrc=0xCA11E4)
    agent_port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent_port.bind(("127.0.0.1", 0))
    port2 = agent_port.getsockname()[1]
    agent_port.close()
    box: dict[str, object] = {}
    sipp = threading.Thread(
        target=lambda: box.setdefault(
            "r",
            run_sipp(
                "uac_siprec.xml",
                bridge,  # type: ignore[arg-type]
                workdir,
                extra=["-set", "port2", str(port2)],
                media_port=free_udp_port(),
            ),
        )
    )
    sipp.start()
    assert wait_for(lambda: "2" in bridge.leg_ports(), 10)
    _send_agent(bridge.leg_ports()["2"], agent)
    sipp.join(timeout=40)
    result = box["r"]
    assert getattr(result, "returncode", 1) == 0, getattr(result, "stderr", "")[-2000:]


def _read(client: redis.Redis, key: str) -> list[Alert | ScoreUpdate | CallEvent]:
    return [decode(fields) for _, fields in client.xrange(key)]


def test_marked_call_alerts_genuine_call_does_not(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    speech = load_speech(shared_dir, 2.0)
    agent = _marked(load_speech(shared_dir, 2.0, skip=40))
    base = 39000 + (time.monotonic_ns() // 1000 % 50) * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "127.0.0.1:0",
            "api_listen": "127.0.0.1:0",
            "dev_fixture_models": "tiny",
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "no-models"))
    bridge = InProcessBridge(bridge_settings, wiring)
    bridge.start()
    try:
        assert wiring.ready()[0]
        _place_call(bridge, tmp_path / "marked", _marked(speech), agent)
        _place_call(bridge, tmp_path / "genuine", speech, agent)
        keys = Keys(settings.key_prefix)
        assert wait_for(
            lambda: (
                sum(
                    1
                    for m in _read(client, keys.events)
                    if isinstance(m, CallEvent) and m.event == "ended"
                )
                == 2
            ),
            20,
        )
        assert wiring.http is not None
        host, port = wiring.http.address
        import urllib.request

        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        assert "callshield_detector_windows_total" in metrics
        assert "callshield_jb_packets_received" in metrics
    finally:
        bridge.stop()  # drains, flushes the publisher

    events = [m for m in _read(client, keys.events) if isinstance(m, CallEvent)]
    started = [e for e in events if e.event == "started"]
    ended = [e for e in events if e.event == "ended"]
    assert len(started) == 2 and len(ended) == 2
    marked_call, genuine_call = started[0], started[1]
    assert [e.call_id for e in ended] == [marked_call.call_id, genuine_call.call_id]
    assert marked_call.correlation_id and genuine_call.correlation_id

    alerts = [m for m in _read(client, keys.alerts) if isinstance(m, Alert)]
    assert {a.alert_id for a in alerts} == {
        alert_id_for(marked_call.correlation_id, Dimension.SYNTHETIC_VOICE, 0)
    }
    first = min(alerts, key=lambda a: a.revision)
    assert first.revision == 1 and first.band is Band.HIGH
    assert all(a.band is Band.HIGH for a in alerts)
    assert {a.dimension for a in alerts} == {Dimension.SYNTHETIC_VOICE}
    assert {(a.call_id, a.correlation_id) for a in alerts} == {
        (marked_call.call_id, marked_call.correlation_id)
    }

    scores = [m for m in _read(client, keys.scores) if isinstance(m, ScoreUpdate)]
    for call in (marked_call, genuine_call):
        internal = {k for k, r in call.legs.items() if r is LegRole.INTERNAL}
        external = {k for k, r in call.legs.items() if r is LegRole.EXTERNAL}
        assert len(internal) == 1 and len(external) == 1
        mine = [s for s in scores if s.call_id == call.call_id]
        assert {s.leg_id for s in mine if s.dimension is Dimension.CALLER_ID} == {"signalling"}
        mine = [s for s in mine if s.dimension is not Dimension.CALLER_ID]  # audio windows
        assert {s.leg_id for s in mine} == external  # the internal leg never scored
        voice = [
            s for s in mine if s.dimension is Dimension.SYNTHETIC_VOICE and s.score is not None
        ]
        assert voice
        high = [s for s in voice if s.score is not None and s.score >= 0.8]
        if call is marked_call:
            assert len(high) >= len(voice) // 2
        else:
            assert not high
        end = next(e for e in ended if e.call_id == call.call_id)
        cov = end.coverage
        assert cov is not None and cov.analysed
        assert set(cov.legs) == internal | external
        (ext,) = external
        (intl,) = internal
        assert cov.legs[ext].analysed and not cov.legs[intl].analysed
        assert cov.legs[ext].media_s > 1.0 and cov.legs[intl].media_s > 1.0
        assert cov.legs[ext].time_to_first_packet_s is not None
        sv = cov.dimensions[Dimension.SYNTHETIC_VOICE]
        assert sv.scored_windows > 0 and sv.analysed_speech_s > 0.5
        assert sv.windows >= sv.scored_windows
        assert Abstention.UNAVAILABLE not in sv.abstentions or sv.unavailable
