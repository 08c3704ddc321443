"""Early media on a plain SIP fork (issue 10), end to end: SIPp, as a PBX forking a call
before it is answered, sends ``X-CallShield-Call-State: early`` on the INVITE and, after
6.5 s of media, a re-INVITE (same SDP) with ``X-CallShield-Call-State: answered``, into
a bridge with its full wiring publishing to a real redis-server. Two RFC 4028 session
refreshes (re-INVITEs re-sending the same SDP and header: ``early`` at 3 s, ``answered``
at 10 s) restate what was said.

The fork's one stream is real speech: 5.5 s carrying the synthetic-voice fixture's
marker (an announcement a synthetic-voice model flags), 1.5 s unmarked, then 6 s marked
again (a synthetic voice after the answer). A plain SIP fork's leg is ``mixed`` (both
parties), on which shipped voice models abstain; the fixture here scores mixed legs too,
so the early-media rule is what decides. Expected: the early windows are scored as
synthetic and published, but no alert comes from them; after the answer the same
marker raises a synthetic-voice alert, whose windows all start after the early part;
the media survives the re-INVITEs; /metrics counts both states under ``sip_header``
once each, the refreshes not again (2.0 each before they stopped counting).
(The SIPREC version, and the same call answered from the start alerting on its first
marked windows: ``test_early_media_e2e.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from bridge_runner import load_speech, run_sipp, wait_for
from early_media_support import marked, marker_bridge, read
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension, LegRole, ScoreUpdate
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings

EARLY_S = 5.5  # the marked announcement while the call is early
ANSWER_S = 6.5  # the re-INVITE saying answered, into the media
AFTER_S = 7.0  # marked speech again from here (after the answer)


@pytest.fixture
def fork_bridge(settings: BusSettings, tmp_path: Path) -> Iterator[InProcessBridge]:
    roles = (LegRole.EXTERNAL, LegRole.MIXED)
    with marker_bridge(settings, tmp_path, roles) as running:
        yield running


def test_plain_sip_fork_early_then_answered_by_reinvite(
    fork_bridge: InProcessBridge,
    shared_dir: Path,
    client: redis.Redis,
    settings: BusSettings,
    tmp_path: Path,
) -> None:
    audio = np.concatenate(
        [
            marked(load_speech(shared_dir, EARLY_S)),
            load_speech(shared_dir, AFTER_S - EARLY_S, skip=10),
            marked(load_speech(shared_dir, 6.0, skip=20)),
        ]
    )
    write_rtp_pcap(tmp_path / "speech.pcap", audio, ssrc=0xCA11)
    keys = Keys(settings.key_prefix)
    result = run_sipp("uac_call_state.xml", fork_bridge, tmp_path, timeout=40)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr[-2000:]

    def events() -> list[CallEvent]:
        return [m for m in read(client, keys.events) if isinstance(m, CallEvent)]

    assert wait_for(lambda: any(e.event == "ended" for e in events()), 20)
    (call_id,) = {e.call_id for e in events()}
    # one ``updated`` per re-INVITE: the early refresh, the answer, the answered refresh
    assert [e.event for e in events()] == ["started", "updated", "updated", "updated", "ended"]
    scored = [
        m
        for m in read(client, keys.scores)
        if isinstance(m, ScoreUpdate)
        and m.call_id == call_id
        and m.dimension is Dimension.SYNTHETIC_VOICE
        and m.score is not None
    ]
    early_flagged = [s for s in scored if s.window_end_s <= EARLY_S and s.score >= 0.5]
    assert len(early_flagged) >= 2, [(s.window_start_s, s.score) for s in scored]
    late_flagged = [s for s in scored if s.window_start_s >= AFTER_S and s.score >= 0.5]
    assert late_flagged, [(s.window_start_s, s.score) for s in scored]  # media went on
    alerts = [m for m in read(client, keys.alerts) if isinstance(m, Alert)]
    assert alerts and {a.call_id for a in alerts} == {call_id}
    assert {a.dimension for a in alerts} == {Dimension.SYNTHETIC_VOICE}
    evidence = [r for a in alerts for r in a.reasons]
    assert evidence and all(r.start_s >= EARLY_S for r in evidence), evidence
    metrics = fork_bridge.bridge.wiring.metrics()[0].decode()  # type: ignore[union-attr]
    assert 'callshield_call_state_total{origin="sip_header",state="early"} 1.0' in metrics
    assert 'callshield_call_state_total{origin="sip_header",state="answered"} 1.0' in metrics
    assert "callshield_call_state_rejected_total{" not in metrics
