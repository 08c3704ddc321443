"""L16 over SIP (issue 12's codec matrix): an offer of L16 (network byte order) at a rate
the core resamples, mono or stereo, is answered with it; more than two channels or a
rate the core does not take is not. End to end, a real bridge answers a real UDP INVITE
offering only RFC 3551's static L16/44100 (payload type 11) and the speech sent as
44.1 kHz big-endian RTP reaches the 8 kHz leg: the same speech, every frame in place."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest
from bridge_runner import load_speech, running_bridge, wait_for
from scipy.signal import resample_poly
from sip_wire import SDP_OFFER
from test_rtp_robustness import _invite

from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.offer_answer import NotAcceptableError, negotiate
from sip_bridge.sip.sdp import SessionDescription


def _offer(formats: str, maps: str) -> SessionDescription:
    sdp = SDP_OFFER.replace("RTP/AVP 0 8 9 101", f"RTP/AVP {formats}")
    for line in ("a=rtpmap:0 PCMU/8000\n", "a=rtpmap:8 PCMA/8000\n", "a=rtpmap:9 G722/8000\n"):
        sdp = sdp.replace(line, "")
    return SessionDescription.parse((sdp + maps).encode())


def test_l16_rates_and_channels_in_the_answer() -> None:
    offer = _offer(
        "97 96 11 98 99 0",
        "a=rtpmap:97 L16/44100/6\na=rtpmap:96 L16/16000\na=rtpmap:98 L16/22050\n"
        "a=rtpmap:99 L16/48000/2\n",
    )
    (stream,) = negotiate(offer)
    assert stream.codec == "L16"
    assert [(p.pt, p.clock_rate, p.channels) for p in stream.payload_types] == [
        (96, 16000, 1),
        (11, 44100, 1),
        (99, 48000, 2),
        (0, 8000, 1),
    ]


def test_l16_at_a_rate_the_core_does_not_take_is_not_acceptable() -> None:
    with pytest.raises(NotAcceptableError):
        negotiate(_offer("98", "a=rtpmap:98 L16/22050\n"))


def test_l16_44k1_call_end_to_end(shared_dir: Path) -> None:
    speech = load_speech(shared_dir, 3.0, skip=12)
    wide = np.clip(resample_poly(speech.astype(np.float64), 441, 80), -32768, 32767)
    pcm = wide.astype(">i2")
    frame = 882  # 20 ms at 44.1 kHz
    with (
        running_bridge() as bridge,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sip,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rtp,
    ):
        sip.bind(("127.0.0.1", 0))
        rtp.bind(("127.0.0.1", 0))
        sip.settimeout(5)
        invite = _invite("l16", rtp.getsockname()[1], sip.getsockname()[1])
        invite = invite.replace(b"RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n", b"RTP/AVP 11\r\n")
        sip.sendto(_fix_length(invite), ("127.0.0.1", bridge.sip_port))
        while True:
            ok = parse_message(sip.recv(65535))
            assert isinstance(ok, SipResponse)
            if ok.status == 200:
                break
        answer = SessionDescription.parse(ok.body)
        assert answer.media[0].formats == ["11"]
        port = answer.media[0].port
        n = len(pcm) // frame
        t0 = time.monotonic()
        for k in range(n):
            head = bytes([0x80, 11]) + k.to_bytes(2, "big") + (k * frame).to_bytes(4, "big")
            body = pcm[k * frame : (k + 1) * frame].tobytes()
            rtp.sendto(head + b"\x00\x00\x44\x01" + body, ("127.0.0.1", port))
            time.sleep(max(0.0, t0 + (k + 1) * 0.02 - time.monotonic()))
        (leg_id,) = bridge.on_loop(lambda: bridge.bridge.media.leg_ids)
        assert wait_for(lambda: len(bridge.sink.captured(leg_id).by_rtp_ts) >= n - 5, 5)
        cap = bridge.sink.captured(leg_id)
    stamps = sorted(cap.by_rtp_ts)
    assert set(np.diff(stamps)) == {frame}  # 20 ms frames on the 44.1 kHz clock, none lost
    got = np.concatenate([cap.by_rtp_ts[ts] for ts in stamps]).astype(np.float64)
    assert got.size == 160 * len(stamps)
    ref, window = speech.astype(np.float64), got[1600:12800]
    corr = max(
        float(np.corrcoef(ref[lag : lag + window.size], window)[0, 1]) for lag in range(1200, 2000)
    )
    assert corr > 0.99, corr


def _fix_length(msg: bytes) -> bytes:
    head, _, body = msg.partition(b"\r\n\r\n")
    lines = [
        b"Content-Length: %d" % len(body) if line.startswith(b"Content-Length") else line
        for line in head.split(b"\r\n")
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
