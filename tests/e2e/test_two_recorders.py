"""Two recorders of one call raise one alert (issue 12): two bridges (two nodes, their
own detector runtimes and outboxes) publishing to one real redis-server each receive a
SIPREC recording of the same call, i.e. the same recorded-session id in the metadata,
from SIPp at the same time, with 6 s of real speech carrying the synthetic-voice
fixture's marker on the external stream. The alert id derives from the correlation key,
so both nodes name the same alert and the bus keeps one entry per (alert id, revision);
the replay detector, which scores both copies of the same audio, raises nothing."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import FRAME, write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension, ScoreUpdate, alert_id_for
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ
from detectors.model_store import ModelSettings
from native.codec import ulaw_encode
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

SESSION = "urn:uuid:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _marked(speech: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (-20 / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)


def _send(port: int, audio: npt.NDArray[np.int16]) -> None:
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


def _bridge(tmp_path: Path, name: str, bus: BusSettings, base: int) -> InProcessBridge:
    settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "dev_fixture_models": "tiny",
        }
    )
    node_bus = bus.model_copy(update={"node_id": name, "state_dir": tmp_path / name})
    wiring = Wiring(settings, node_bus, ModelSettings(models_dir=tmp_path / "no-models"))
    return InProcessBridge(settings, wiring)


def _record(
    bridge: InProcessBridge,
    workdir: Path,
    external: npt.NDArray[np.int16],
    agent: npt.NDArray[np.int16],
    box: dict[str, object],
) -> None:
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", external, ssrc=0xCA11E4)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port2 = s.getsockname()[1]
    sipp = threading.Thread(
        target=lambda: box.setdefault(
            "r",
            run_sipp(
                "uac_siprec_session.xml",
                bridge,  # type: ignore[arg-type]
                workdir,
                extra=["-set", "port2", str(port2), "-set", "session", SESSION],
                media_port=free_udp_port(),
            ),
        )
    )
    sipp.start()
    if wait_for(lambda: "2" in bridge.leg_ports(), 10):
        _send(bridge.leg_ports()["2"], agent)
    sipp.join(timeout=40)


def test_two_recordings_of_one_call_raise_one_alert(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    external = _marked(load_speech(shared_dir, 6.0))
    agent = load_speech(shared_dir, 6.0, skip=40)
    base = 39000 + (time.monotonic_ns() // 1000 % 40) * 20
    bridges = [
        _bridge(tmp_path, "node-a", settings, base),
        _bridge(tmp_path, "node-b", settings, base + 1000),
    ]
    for b in bridges:
        b.start()
    boxes: list[dict[str, object]] = [{}, {}]
    try:
        placers = [
            threading.Thread(
                target=_record, args=(b, tmp_path / f"rec{i}", external, agent, boxes[i])
            )
            for i, b in enumerate(bridges)
        ]
        for p in placers:
            p.start()
        for p in placers:
            p.join(timeout=60)
        for box in boxes:
            result = box.get("r")
            assert getattr(result, "returncode", 1) == 0, getattr(result, "stderr", "")[-2000:]
        keys = Keys(settings.key_prefix)

        def ended() -> int:
            return sum(
                1
                for _, f in client.xrange(keys.events)
                if isinstance(m := decode(f), CallEvent) and m.event == "ended"
            )

        assert wait_for(lambda: ended() == 2, 20)
    finally:
        for b in bridges:
            b.stop()  # drains, flushes each node's publisher

    messages = [decode(fields) for _, fields in client.xrange(Keys(settings.key_prefix).events)]
    started = [m for m in messages if isinstance(m, CallEvent) and m.event == "started"]
    assert len(started) == 2 and len({e.call_id for e in started}) == 2
    assert {e.correlation_id for e in started} == {SESSION}  # two recordings, one call

    alerts = [
        m
        for _, f in client.xrange(Keys(settings.key_prefix).alerts)
        if isinstance(m := decode(f), Alert)
    ]
    assert alerts, "the marked call raised no alert"
    assert {a.alert_id for a in alerts} == {alert_id_for(SESSION, Dimension.SYNTHETIC_VOICE, 0)}
    assert {a.correlation_id for a in alerts} == {SESSION}
    per_revision = Counter((a.alert_id, a.revision) for a in alerts)
    assert max(per_revision.values()) == 1, per_revision  # one entry per revision on the bus
    stats = [b.bridge.wiring.bus.stats for b in bridges if b.bridge.wiring is not None]
    assert len(stats) == 2
    assert all(s.alerts_published + s.alerts_deduplicated >= 1 for s in stats)  # both alerted
    assert sum(s.alerts_deduplicated for s in stats) >= 1  # and the bus kept one of each
    scores = [
        m
        for _, f in client.xrange(Keys(settings.key_prefix).scores)
        if isinstance(m := decode(f), ScoreUpdate)
    ]
    replay_scored = {
        s.call_id for s in scores if s.dimension is Dimension.REPLAY and s.score is not None
    }
    assert replay_scored == {e.call_id for e in started}  # it saw both copies, alerted on none
