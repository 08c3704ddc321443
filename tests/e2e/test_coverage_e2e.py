"""Coverage of real SIP calls (DESIGN §8, issue 10): a real bridge in-process (tiny dev
fixture models, a real redis-server, a short RTP timeout) takes SIPp calls.

- A SIPREC call whose agent stream never carries RTP: ``one_way``, its silent leg
  flagged, the speaking leg analysed with a time to first packet.
- An answered plain SIP call whose RTP never arrives: hung up for ``rtp_timeout``,
  ``media: none``, counted on ``callshield_calls_no_media_total``; the covered ratio
  falls below the objective and ``system.coverage.degraded`` lands on the bus.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import CallEvent, Dimension, LegRole, SystemEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

SV = Dimension.SYNTHETIC_VOICE


def _metrics(wiring: Wiring) -> dict[str, float]:
    assert wiring.http is not None
    host, port = wiring.http.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(callshield_(?:calls|coverage)\S*) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_one_way_and_no_media_calls(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    base = 39600 + (time.monotonic_ns() // 1000 % 20) * 10
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 9}",
            "drain_timeout_s": 3.0,
            "http_listen": "127.0.0.1:0",
            "rtp_timeout_s": 1.0,
            "dev_fixture_models": "tiny",
        }
    )
    bus = settings.model_copy(
        update={
            "coverage_min_speech_s": 0.5,
            "coverage_objective": 0.75,
            "coverage_window_calls": 2,
            "coverage_min_calls": 1,
        }
    )
    wiring = Wiring(bridge_settings, bus, ModelSettings(models_dir=tmp_path / "no-models"))
    bridge = InProcessBridge(bridge_settings, wiring)
    keys = Keys(bus.key_prefix)

    def ended() -> list[CallEvent]:
        return [
            m
            for _, f in client.xrange(keys.events)
            if isinstance(m := decode(f), CallEvent) and m.event == "ended"
        ]

    bridge.start()
    try:
        (tmp_path / "rec").mkdir()
        speech = load_speech(shared_dir, 2.5)
        write_rtp_pcap(tmp_path / "rec" / "speech.pcap", speech, ssrc=7)
        # SIPp plays the pcap to the first stream only: the agent's stream stays silent
        extra = ["-set", "port2", str(free_udp_port())]
        one_way = run_sipp("uac_siprec.xml", bridge, tmp_path / "rec", extra=extra)  # type: ignore[arg-type]
        assert one_way.returncode == 0, one_way.stderr[-2000:]
        assert wait_for(lambda: len(ended()) == 1, 10)
        after_one_way = _metrics(wiring)
        (tmp_path / "silent").mkdir()
        silent = run_sipp("uac_no_media.xml", bridge, tmp_path / "silent", timeout=10)  # type: ignore[arg-type]
        assert silent.returncode == 0, silent.stderr[-2000:]  # it got our BYE and answered
        assert wait_for(lambda: len(ended()) == 2, 10)
        assert wait_for(lambda: client.xlen(keys.system) > 0, 5)
        after_silent = _metrics(wiring)
    finally:
        bridge.stop()

    first, second = ended()
    # the one-way SIPREC call: the caller's stream spoke, the agent's never did
    cov = first.coverage
    assert first.reason == "bye" and cov is not None and cov.media == "one_way"
    (ext,) = [k for k, r in first.legs.items() if r is LegRole.EXTERNAL]
    (intl,) = [k for k, r in first.legs.items() if r is LegRole.INTERNAL]
    assert cov.legs[intl].silent and cov.legs[intl].time_to_first_packet_s is None
    assert cov.legs[intl].media_s == 0 and cov.legs[intl].packets_received == 0
    assert not cov.legs[ext].silent and cov.legs[ext].media_s > 1.0
    ttfp = cov.legs[ext].time_to_first_packet_s
    assert ttfp is not None and 0 <= ttfp < cov.duration_s
    assert cov.dimensions[SV].analysed_speech_s >= 0.5  # covered
    assert after_one_way['callshield_calls_covered_ratio{dimension="synthetic_voice"}'] == 1.0
    assert after_one_way["callshield_calls_one_way_total"] == 1
    assert after_one_way["callshield_calls_no_media_total"] == 0

    # the silent plain SIP call: answered, no RTP, ended by the RTP timeout
    cov = second.coverage
    assert second.reason == "rtp_timeout" and cov is not None and cov.analysed
    assert cov.media == "none" and cov.duration_s >= 1.0  # not before the RTP timeout
    assert all(leg.silent and leg.time_to_first_packet_s is None for leg in cov.legs.values())
    assert len(cov.legs) == 1
    assert set(cov.dimensions) == set(wiring.coverage.dimensions)  # listed, empty
    assert all(d.analysed_speech_s == 0 for d in cov.dimensions.values()), cov.dimensions
    assert cov.dimensions[SV].scored_windows == 0  # abstained: no speech in silence
    assert after_silent["callshield_calls_no_media_total"] == 1
    assert after_silent['callshield_calls_ended_total{reason="rtp_timeout"}'] == 1
    assert after_silent['callshield_calls_ended_total{reason="bye"}'] == 1
    assert after_silent['callshield_calls_covered_ratio{dimension="synthetic_voice"}'] == 0.5
    assert after_silent['callshield_coverage_degraded{dimension="synthetic_voice"}'] == 1

    system = [decode(f) for _, f in client.xrange(keys.system)]
    degraded = [
        e
        for e in system
        if isinstance(e, SystemEvent) and e.coverage and e.coverage.dimension is SV
    ]
    assert [e.type for e in degraded] == ["system.coverage.degraded"]
    assert degraded[0].coverage is not None and degraded[0].coverage.covered_calls == 1
