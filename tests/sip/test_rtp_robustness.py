"""An RTP flood and spoofed packets on one call's port during live calls: the other
call's frames stay bit-exact with its source (what a clean run yields), and the attacked
call's own audio is untouched too (the source lock drops the foreign packets)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
from bridge_runner import load_speech, running_bridge, wait_for

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription

FRAME = 160


def _invite(call_id: str, rtp_port: int, sip_port: int) -> bytes:
    sdp = (
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendonly\r\n"
    ).encode()
    head = (
        f"INVITE sip:monitor@127.0.0.1:{sip_port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{sip_port};branch=z9hG4bK{call_id}\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=f{call_id}\r\nTo: <sip:monitor@127.0.0.1>\r\n"
        f"Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{sip_port}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n"
    )
    return head.encode() + sdp


def _call(sip: socket.socket, bridge_port: int, call_id: str, rtp_port: int) -> int:
    """INVITE over UDP; returns the RTP port the bridge answered with."""
    sip.sendto(_invite(call_id, rtp_port, sip.getsockname()[1]), ("127.0.0.1", bridge_port))
    while True:
        msg = parse_message(sip.recv(65535))
        assert isinstance(msg, SipResponse)
        if msg.status == 200:
            return SessionDescription.parse(msg.body).media[0].port


def _rtp(seq: int, ts: int, ssrc: int, payload: bytes) -> bytes:
    return (
        bytes([0x80, 0])
        + seq.to_bytes(2, "big")
        + ts.to_bytes(4, "big")
        + ssrc.to_bytes(4, "big")
        + payload
    )


def test_flood_and_spoof_leave_other_calls_exact(shared_dir: Path) -> None:
    audio = {"a": load_speech(shared_dir, 2.0), "b": load_speech(shared_dir, 2.0, skip=30)}
    ulaw = {k: ulaw_encode(v) for k, v in audio.items()}
    socks = {k: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for k in ("a", "b", "evil", "sip")}
    for s in socks.values():
        s.bind(("127.0.0.1", 0))
    socks["sip"].settimeout(5)
    with running_bridge(drain_timeout_s=0.2) as bridge:
        ports = {
            k: _call(socks["sip"], bridge.sip_port, f"robust-{k}", socks[k].getsockname()[1])
            for k in ("a", "b")
        }
        calls = bridge.calls()
        leg_of = {c.sip_call_id[-1]: next(iter(c.legs)) for c in calls.values()}
        ssrc = {"a": 0xAAAA0001, "b": 0xBBBB0002}
        stop = threading.Event()

        def attack() -> None:  # starts once the legs are locked; bounded
            time.sleep(0.4)
            target = ("127.0.0.1", ports["a"])
            for k in range(6000):
                if stop.is_set():
                    return
                if k % 3 == 0:  # well-formed RTP, the victim's SSRC, from a foreign port
                    socks["evil"].sendto(_rtp(k, k * FRAME, ssrc["a"], b"\xff" * FRAME), target)
                else:
                    socks["evil"].sendto(os.urandom(12 + k % 200), target)
                if k % 200 == 0:
                    time.sleep(0.01)

        attacker = threading.Thread(target=attack)
        attacker.start()
        t0 = time.monotonic()
        for k in range(len(ulaw["a"]) // FRAME):
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for name in ("a", "b"):
                payload = ulaw[name][k * FRAME : (k + 1) * FRAME]
                socks[name].sendto(
                    _rtp(100 + k, k * FRAME, ssrc[name], payload), ("127.0.0.1", ports[name])
                )
        stop.set()
        attacker.join()
        time.sleep(0.5)  # let the playout clock drain the buffers
        stats_a = bridge.on_loop(lambda: bridge.bridge.media.stats(leg_of["a"]))
        for name in ("a", "b"):
            cap = bridge.sink.captured(leg_of[name])
            decoded = ulaw_decode(ulaw[name])
            exact = [
                np.array_equal(pcm, decoded[ts : ts + pcm.size])
                for ts, pcm in cap.by_rtp_ts.items()
            ]
            assert all(exact), f"call {name}: {exact.count(False)} frames differ from the source"
            assert len(exact) >= 95, f"call {name}: only {len(exact)} normal frames"
        counters = stats_a["counters"]
        assert isinstance(counters, dict)
        assert counters["srclock"]["rejected_address"] > 0
        assert (
            sum(counters["parse_errors"].values()) > 0
            or counters["srclock"]["rejected_address"] > 1000
        )
        assert wait_for(lambda: len(bridge.calls()) == 2)  # nobody hung up
    for s in socks.values():
        s.close()
