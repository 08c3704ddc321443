"""SIPp as a PBX forking a call before it is answered, into a real bridge (SIP over UDP on
127.0.0.1) that answers after a delay: in the early dialog a re-INVITE gets 500 with
Retry-After (RFC 3261 §14.2) and changes nothing, an UPDATE without SDP saying
``answered`` gets 200 (RFC 3311) and is applied when the bridge answers (the scenario
checks the status codes, the Retry-After value and which 200 answers what)."""

from __future__ import annotations

from pathlib import Path

from bridge_runner import run_sipp, running_bridge, wait_for


def test_update_and_reinvite_in_the_early_dialog(tmp_path: Path) -> None:
    with running_bridge(answer_delay_s=2.0) as bridge:
        result = run_sipp("uac_early_update.xml", bridge, tmp_path, timeout=20)
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        assert bridge.events() == [("started", ""), ("updated", "answered"), ("ended", "bye")]
        said = bridge.on_loop(lambda: bridge.bridge.controller.call_states.snapshot())
        assert said == {("said", "sip_header", "early"): 1, ("said", "sip_header", "answered"): 1}
        stats = bridge.on_loop(lambda: dict(bridge.bridge.uas.stats))
        assert stats["sent.500"] == 1 and stats["sent.180"] == 1 and "sent.491" not in stats
