"""Leg roles of a plain SIP fork (issue 10: audio provenance), end to end: SIPp, as a PBX
forking a call's two directions with an ordinary INVITE (two audio m-lines, not SIPREC),
into a bridge with its full wiring publishing to a real redis-server; its
synthetic-voice detector is the fixture model scoring ``external`` legs only, as the
shipped voice models do.

The caller's line carries real speech with the fixture's marker (a synthetic voice).
First the PBX says nothing: both legs are ``mixed`` and every voice window abstains
``leg_unknown``, the marker notwithstanding. Then the same call with
``X-CallShield-Leg-Roles: external,internal``: the legs are published as external and
internal, the external leg's windows are scored (and flagged), the internal leg is never
analysed, and /metrics counts the roles under ``sip_header`` once each, although two
session refreshes (RFC 4028 re-INVITEs) re-send the same SDP and header mid-call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from bridge_runner import load_speech, run_sipp, wait_for
from early_media_support import marked, marker_bridge, read
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import Abstention, CallEvent, Dimension, LegRole, ScoreUpdate
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings

HEADER = "X-CallShield-Leg-Roles: external,internal"


@pytest.fixture
def voice_bridge(settings: BusSettings, tmp_path: Path) -> Iterator[InProcessBridge]:
    with marker_bridge(settings, tmp_path) as running:  # scores external legs only
        yield running


def _fork(bridge: InProcessBridge, workdir: Path, roles_line: str) -> None:
    result = run_sipp(
        "uac_leg_roles.xml",
        bridge,  # type: ignore[arg-type]
        workdir,
        extra=["-key", "roles", roles_line],
        timeout=30,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_leg_roles_header_lets_voice_detectors_score_the_external_leg(
    voice_bridge: InProcessBridge,
    shared_dir: Path,
    client: redis.Redis,
    settings: BusSettings,
    tmp_path: Path,
) -> None:
    keys = Keys(settings.key_prefix)
    write_rtp_pcap(tmp_path / "speech.pcap", marked(load_speech(shared_dir, 5.0)), ssrc=0x1E6)

    def events() -> list[CallEvent]:
        return [m for m in read(client, keys.events) if isinstance(m, CallEvent)]

    def voice(call_id: str) -> list[ScoreUpdate]:
        return [
            m
            for m in read(client, keys.scores)
            if isinstance(m, ScoreUpdate)
            and m.call_id == call_id
            and m.dimension is Dimension.SYNTHETIC_VOICE
        ]

    def ended() -> list[str]:
        return [e.call_id for e in events() if e.event == "ended"]

    _fork(voice_bridge, tmp_path, "Subject: fork")  # the PBX says nothing
    assert wait_for(lambda: len(ended()) == 1, 20)
    (unsaid,) = ended()
    (started,) = [e for e in events() if e.call_id == unsaid and e.event == "started"]
    assert sorted(started.legs.values()) == [LegRole.MIXED, LegRole.MIXED]
    before = voice(unsaid)
    assert before, "no synthetic-voice windows at all"
    assert all(s.score is None and s.abstained is Abstention.LEG_UNKNOWN for s in before)

    _fork(voice_bridge, tmp_path, HEADER)
    assert wait_for(lambda: len(ended()) == 2, 20)
    said = next(c for c in ended() if c != unsaid)
    (started,) = [e for e in events() if e.call_id == said and e.event == "started"]
    by_role = {role: leg_id for leg_id, role in started.legs.items()}
    assert set(by_role) == {LegRole.EXTERNAL, LegRole.INTERNAL}
    assert by_role[LegRole.EXTERNAL].endswith(".0")  # the header's first audio m-line
    after = voice(said)
    assert after and {s.leg_id for s in after} == {by_role[LegRole.EXTERNAL]}
    scored = [s for s in after if s.score is not None]
    assert scored and not [s for s in after if s.abstained is Abstention.LEG_UNKNOWN]
    assert any(s.score is not None and s.score >= 0.5 for s in scored), [
        (s.window_start_s, s.score) for s in after
    ]
    metrics = voice_bridge.bridge.wiring.metrics()[0].decode()  # type: ignore[union-attr]
    assert 'callshield_leg_role_total{origin="sip_header",role="external"} 1.0' in metrics
    assert 'callshield_leg_role_total{origin="sip_header",role="internal"} 1.0' in metrics
