"""SIPp (Debian sip-tester) as the caller against a real bridge on 127.0.0.1: a call
with real speech played from a pcap, hold by re-INVITE, resume by UPDATE, BYE; a
SIPREC INVITE with two streams and metadata; CANCEL before answer. Asserts on calls,
legs, events and the audio out of the jitter buffer (bit-exact at each RTP timestamp)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
from bridge_runner import load_speech, run_sipp, running_bridge, wait_for
from rtp_pcap import FRAME, RtpTrack, write_rtp_pcap

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.sinks import CapturedLeg


def _matching_frames(cap: CapturedLeg, track: RtpTrack) -> tuple[int, int]:
    """(frames equal to the source at their RTP timestamp, frames that differ)."""
    good = bad = 0
    for ts, pcm in cap.by_rtp_ts.items():
        off = (ts - track.ts0) & 0xFFFFFFFF
        ref = track.decoded[off : off + pcm.size]
        if ref.size == pcm.size and np.array_equal(ref, pcm):
            good += 1
        else:
            bad += 1
    return good, bad


def test_call_with_speech_hold_resume_bye(shared_dir: Path, tmp_path: Path) -> None:
    track = write_rtp_pcap(tmp_path / "speech.pcap", load_speech(shared_dir, 2.0), ssrc=0xC0FFEE)
    with running_bridge() as bridge:
        result = run_sipp("uac_call.xml", bridge, tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        events = bridge.publisher.events
        assert [(e.event, e.reason) for e, _ in events] == [
            ("started", ""),
            ("held", ""),
            ("resumed", ""),
            ("ended", "bye"),
        ]
        call = events[0][1]
        (leg,) = call.legs.values()
        assert (call.kind, call.ani, call.dnis, leg.codec) == (
            "sip",
            "+15550123",
            "service",
            "PCMU",
        )
        good, bad = _matching_frames(bridge.sink.captured(leg.leg_id), track)
        assert bad == 0 and good >= 95  # 100 packets sent; probation drops the first
        assert "paused" in bridge.sink.counts(leg.leg_id)  # the hold reached the buffer


def test_siprec_two_streams_with_metadata(shared_dir: Path, tmp_path: Path) -> None:
    caller = load_speech(shared_dir, 2.0)
    agent = load_speech(shared_dir, 2.0, skip=40)
    track = write_rtp_pcap(tmp_path / "speech.pcap", caller, ssrc=0xCA11E4)
    agent_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent_sock.bind(("127.0.0.1", 0))
    with running_bridge() as bridge:
        box: dict[str, subprocess.CompletedProcess[str]] = {}
        port2 = agent_sock.getsockname()[1]
        sipp = threading.Thread(
            target=lambda: box.setdefault(
                "r",
                run_sipp("uac_siprec.xml", bridge, tmp_path, extra=["-set", "port2", str(port2)]),
            )
        )
        sipp.start()
        assert wait_for(lambda: len(bridge.calls()) == 1)
        (call,) = bridge.calls().values()
        legs = {leg.label: leg for leg in call.legs.values()}
        assert {k: (v.role.value, v.role_source) for k, v in legs.items()} == {
            "1": ("external", "siprec_metadata"),
            "2": ("internal", "siprec_metadata"),
        }
        assert (call.kind, call.ani, call.dnis) == ("siprec", "+15550142", "agent7")
        ulaw = ulaw_encode(agent)
        t0 = time.monotonic()
        for k in range(len(ulaw) // FRAME):  # the agent stream, from the Python side
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            header = bytes([0x80, 0]) + (7000 + k).to_bytes(2, "big")
            header += (160 * k).to_bytes(4, "big") + (0xA6E17).to_bytes(4, "big")
            agent_sock.sendto(
                header + ulaw[k * FRAME : (k + 1) * FRAME], ("127.0.0.1", legs["2"].local_port)
            )
        sipp.join(timeout=40)
        assert box["r"].returncode == 0, box["r"].stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        good, bad = _matching_frames(bridge.sink.captured(legs["1"].leg_id), track)
        assert bad == 0 and good >= 95
        agent_track = RtpTrack(ulaw_decode(ulaw), 0xA6E17, 7000, 0)
        good2, bad2 = _matching_frames(bridge.sink.captured(legs["2"].leg_id), agent_track)
        assert bad2 == 0 and good2 >= 95
        assert bridge.events() == [("started", ""), ("ended", "bye")]
    agent_sock.close()


def test_cancel_before_answer(tmp_path: Path) -> None:
    with running_bridge(answer_delay_s=3.0) as bridge:
        result = run_sipp("uac_cancel.xml", bridge, tmp_path, timeout=15)
        assert result.returncode == 0, result.stderr[-2000:]
        time.sleep(0.1)
        assert bridge.calls() == {} and bridge.events() == []
        stats = bridge.on_loop(lambda: dict(bridge.bridge.uas.stats))
        assert stats["sent.487"] == 1 and stats["sent.180"] == 1
