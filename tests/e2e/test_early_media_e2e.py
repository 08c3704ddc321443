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

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from early_media_support import marked, marker_bridge, read
from rtp_pcap import write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension, ScoreUpdate
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings

MARKED_S = 5.5  # the announcement; the UPDATE (answer) comes 6.5 s into the media


@pytest.fixture
def bridge(settings: BusSettings, tmp_path: Path) -> Iterator[InProcessBridge]:
    with marker_bridge(settings, tmp_path) as running:
        yield running


def _call(
    state: str, bridge: InProcessBridge, workdir: Path, client: redis.Redis, keys: Keys
) -> str:
    """One SIPp call with the recorded call ``state`` at the INVITE; its call id."""
    before = {m.call_id for m in read(client, keys.events) if isinstance(m, CallEvent)}
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
            for m in read(client, keys.events)
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
    announcement = marked(load_speech(shared_dir, MARKED_S))
    person = load_speech(shared_dir, 6.5, skip=10)
    write_rtp_pcap(tmp_path / "speech.pcap", np.concatenate([announcement, person]), ssrc=0xEA21)
    keys = Keys(settings.key_prefix)

    def synth(call_id: str) -> list[ScoreUpdate]:
        return [
            m
            for m in read(client, keys.scores)
            if isinstance(m, ScoreUpdate)
            and m.call_id == call_id
            and m.dimension is Dimension.SYNTHETIC_VOICE
            and m.score is not None
        ]

    def alerts(call_id: str) -> list[Alert]:
        return [
            m for m in read(client, keys.alerts) if isinstance(m, Alert) and m.call_id == call_id
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
