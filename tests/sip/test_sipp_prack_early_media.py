"""SIPp as a caller requiring 100rel (RFC 3262) against a real bridge (SIP over UDP on
127.0.0.1) that answers after a delay: the reliable 180 carries the SDP answer (RFC 3261
§13.2.1, RFC 6337) with the bridge's media port, SIPp PRACKs it and plays real speech at
once to the port it learned from the 180 (early media), then gets the 200 with the same
SDP (same o= version: no second answer). The call's media is taken before and after
the 200, bit-exact at each RTP timestamp; before the 200 the call is the dialog's early
media (scored, never alerting), after it answered."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
from bridge_runner import RunningBridge, load_speech, run_sipp, running_bridge, wait_for
from rtp_pcap import RtpTrack, write_rtp_pcap


def _exact(bridge: RunningBridge, leg_id: str, track: RtpTrack) -> tuple[int, int]:
    """(frames equal to the source at their RTP timestamp, frames that differ)."""
    good = bad = 0
    for ts, pcm in bridge.sink.captured(leg_id).by_rtp_ts.items():
        off = (ts - track.ts0) & 0xFFFFFFFF
        ref = track.decoded[off : off + pcm.size]
        ok = ref.size == pcm.size and np.array_equal(ref, pcm)
        good, bad = good + ok, bad + (not ok)
    return good, bad


def _early_snapshot(bridge: RunningBridge) -> tuple[bool, str, int] | None:
    """(call still early, its leg, its local port), read on the bridge's loop."""
    calls = bridge.bridge.controller.calls
    if len(calls) != 1:
        return None
    (call,) = calls.values()
    (leg,) = call.legs.values()
    return call.early_media, leg.leg_id, leg.local_port


def test_reliable_180_answers_the_offer_and_media_flows_before_the_200(
    shared_dir: Path, tmp_path: Path
) -> None:
    track = write_rtp_pcap(tmp_path / "speech.pcap", load_speech(shared_dir, 4.0), ssrc=0xEA51)
    with running_bridge(answer_delay_s=2.0) as bridge:
        box: dict[str, subprocess.CompletedProcess[str]] = {}
        sipp = threading.Thread(
            target=lambda: box.setdefault(
                "r",
                run_sipp("uac_prack_early_media.xml", bridge, tmp_path, extra=["-trace_logs"]),
            )
        )
        sipp.start()
        leg_id, port, early_frames, seen_early = "", 0, 0, False
        while sipp.is_alive():
            snap = bridge.on_loop(lambda: _early_snapshot(bridge))
            if snap is not None:
                early, leg_id, port = snap
                if early:  # read before the 200 was sent: these frames are early media
                    seen_early = True
                    early_frames = _exact(bridge, leg_id, track)[0]
            time.sleep(0.05)
        sipp.join()
        result = box["r"]
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        logs = "".join(p.read_text() for p in tmp_path.glob("uac_prack_early_media_*_logs.log"))
        said = dict(re.findall(r"(180|200) (port=\d+ o=\d+ \d+)", logs))
        assert said["180"] == said["200"] and said["180"].startswith(f"port={port} o=")
        good, bad = _exact(bridge, leg_id, track)
        assert seen_early and early_frames >= 40  # ~2 s of media before the 200
        assert bad == 0 and good >= early_frames + 40  # and after it
        assert bridge.events() == [("started", ""), ("updated", "answered"), ("ended", "bye")]
        states = bridge.on_loop(lambda: bridge.bridge.controller.call_states.snapshot())
        assert states == {("said", "sip_dialog", "early"): 1, ("said", "sip_dialog", "answered"): 1}
        stats = bridge.on_loop(lambda: dict(bridge.bridge.uas.stats))
        assert (stats["answer_in_reliable_provisional"], stats["prack"]) == (1, 1)
