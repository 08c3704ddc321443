"""Early media is scored but never alerts (issue 10, DESIGN §2).

SIPp places SIPREC calls into a bridge running the synthetic-voice fixture (it flags
audio carrying its marker tone), publishing to a real redis-server. The caller's stream
carries 5.5 s of marked real speech (an announcement a synthetic-voice model flags),
then real unmarked speech. The recording metadata says the recorded call is ``early``
(a vendor extension, ``sip_bridge.sip.siprec``) until an UPDATE after 6.5 s of media says
it was answered.

- early at the INVITE: the marked windows are scored (and score as synthetic) but no
  alert is raised; the windows after the answer are scored too.
- the same call, metadata saying ``answered`` from the start: the marked windows alert
  (so the first call's silence is the early-media rule, not a weak marker).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ, aasist_fixture
from detectors.model_store import ModelSettings
from detectors.onnx_detector import OnnxDetector
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

I16 = npt.NDArray[np.int16]
MARKED_S = 5.5  # the announcement; the UPDATE (answer) comes 6.5 s into the media


def _marked(audio: I16, dbfs: float = -20.0) -> I16:
    t = np.arange(audio.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(audio + tone, -32768, 32767).astype(np.int16)


@pytest.fixture
def bridge(settings: BusSettings, tmp_path: Path) -> Iterator[InProcessBridge]:
    base = 41000 + (time.monotonic_ns() // 1000 % 40) * 100
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 99}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "detector_workers": 2,
            "replay_detection": False,
        }
    )
    data, manifest = aasist_fixture(tiny=True)
    wiring = Wiring(
        bridge_settings,
        settings,
        ModelSettings(models_dir=tmp_path / "none"),
        [OnnxDetector(manifest, data)],
    )
    running = InProcessBridge(bridge_settings, wiring)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _read(client: redis.Redis, key: str) -> list[object]:
    return [decode(fields) for _, fields in client.xrange(key)]


def _call(
    state: str, bridge: InProcessBridge, workdir: Path, client: redis.Redis, keys: Keys
) -> str:
    """One SIPp call with the recorded call ``state`` at the INVITE; its call id."""
    before = {m.call_id for m in _read(client, keys.events) if isinstance(m, CallEvent)}
    result = run_sipp(
        "uac_siprec_early.xml",
        bridge,  # type: ignore[arg-type]
        workdir,
        extra=["-set", "port2", str(free_udp_port()), "-set", "state", state],
        media_port=free_udp_port(),
        timeout=40,
    )
    assert result.returncode == 0, result.stderr[-2000:]

    def ended() -> list[str]:
        return [
            m.call_id
            for m in _read(client, keys.events)
            if isinstance(m, CallEvent) and m.event == "ended" and m.call_id not in before
        ]

    assert wait_for(lambda: len(ended()) == 1, 20)
    return ended()[0]


def test_early_media_is_scored_but_never_alerts(
    bridge: InProcessBridge,
    shared_dir: Path,
    client: redis.Redis,
    settings: BusSettings,
    tmp_path: Path,
) -> None:
    announcement = _marked(load_speech(shared_dir, MARKED_S))
    person = load_speech(shared_dir, 6.5, skip=10)
    write_rtp_pcap(tmp_path / "speech.pcap", np.concatenate([announcement, person]), ssrc=0xEA21)
    keys = Keys(settings.key_prefix)

    def synth(call_id: str) -> list[ScoreUpdate]:
        return [
            m
            for m in _read(client, keys.scores)
            if isinstance(m, ScoreUpdate)
            and m.call_id == call_id
            and m.dimension is Dimension.SYNTHETIC_VOICE
            and m.score is not None
        ]

    def alerts(call_id: str) -> list[Alert]:
        return [
            m for m in _read(client, keys.alerts) if isinstance(m, Alert) and m.call_id == call_id
        ]

    early = _call("early", bridge, tmp_path, client, keys)
    scored = synth(early)
    flagged_early = [s for s in scored if s.window_end_s <= MARKED_S and s.score >= 0.5]
    assert len(flagged_early) >= 2, [(s.window_start_s, s.score) for s in scored]
    assert [s for s in scored if s.window_start_s >= MARKED_S + 1.5]  # after the answer
    assert alerts(early) == []

    answered = _call("answered", bridge, tmp_path, client, keys)
    assert [s for s in synth(answered) if s.window_end_s <= MARKED_S and s.score >= 0.5]
    raised = alerts(answered)
    assert raised and {a.dimension for a in raised} == {Dimension.SYNTHETIC_VOICE}
