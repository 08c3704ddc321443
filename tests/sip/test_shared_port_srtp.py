"""SDES-SRTP legs on the bridge's shared RTP port: two real UDP INVITEs with RTP/SAVP
offers and their own a=crypto keys are answered with the one shared port; libsrtp
protects each caller's audio with its key; the C demultiplexer picks the leg by the clear
header's source, then that leg's key authenticates and decrypts. Each leg decodes only
its own audio; a packet from a leg's source protected with the other leg's key, and a
forged one, are counted as auth failures on that leg and dropped, and the other leg does
not notice."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time

import numpy as np
import pylibsrtp
from bridge_runner import free_udp_port, running_bridge, wait_for

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription

FRAME = 160
PACKETS = 40
LEVEL = {"a": 1200, "b": -2500}  # each caller's constant sample value
SSRC = {"a": 0xA11CE, "b": 0xB0B}


def _invite(call_id: str, rtp_port: int, sip_port: int, key: bytes) -> bytes:
    sdp = (
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(key).decode()}\r\n"
        "a=sendonly\r\n"
    ).encode()
    head = (
        f"INVITE sip:monitor@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{sip_port};branch=z9hG4bK{call_id}\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=f{call_id}\r\nTo: <sip:monitor@127.0.0.1>\r\n"
        f"Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{sip_port}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n"
    )
    return head.encode() + sdp


def _answered_port(sip: socket.socket, bridge_port: int, invite: bytes) -> int:
    sip.sendto(invite, ("127.0.0.1", bridge_port))
    while True:
        msg = parse_message(sip.recv(65535))
        assert isinstance(msg, SipResponse)
        if msg.status == 200:
            assert b"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:" in msg.body
            return SessionDescription.parse(msg.body).media[0].port
        assert msg.status < 200, msg.status


def _sender(key: bytes) -> pylibsrtp.Session:
    return pylibsrtp.Session(
        policy=pylibsrtp.Policy(
            key=key,
            ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
            srtp_profile=pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
        )
    )


def _plain(seq: int, ssrc: int, value: int) -> bytes:
    payload = ulaw_encode(np.full(FRAME, value, np.int16))
    return struct.pack("!BBHII", 0x80, 0, seq, seq * FRAME, ssrc) + payload


def _decoded(value: int) -> int:
    return int(ulaw_decode(ulaw_encode(np.full(1, value, np.int16)))[0])


def test_two_srtp_legs_share_the_port_and_a_foreign_key_or_forgery_is_dropped() -> None:
    keys = {"a": os.urandom(30), "b": os.urandom(30)}
    shared = free_udp_port()
    socks = {n: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for n in ("a", "b", "sip")}
    try:
        for s in socks.values():
            s.bind(("127.0.0.1", 0))
        socks["sip"].settimeout(5)
        with running_bridge(rtp_shared_port=shared) as bridge:
            sip_port = socks["sip"].getsockname()[1]
            for name in ("a", "b"):
                rtp_port = socks[name].getsockname()[1]
                invite = _invite(f"srtp{name}", rtp_port, sip_port, keys[name])
                assert _answered_port(socks["sip"], bridge.sip_port, invite) == shared
            calls = {c.sip_call_id: c for c in bridge.calls().values()}
            leg = {n: next(iter(calls[f"srtp{n}"].legs.values())).leg_id for n in ("a", "b")}
            senders = {n: _sender(keys[n]) for n in ("a", "b")}
            other_key = _sender(keys["b"])  # second contexts: the senders keep their index
            t0 = time.monotonic()
            for seq in range(1, PACKETS + 1):
                time.sleep(max(0.0, t0 + seq * 0.02 - time.monotonic()))
                if seq == 20:  # from a's source, a's SSRC and sequence, b's key
                    foreign = other_key.protect(_plain(seq, SSRC["a"], LEVEL["b"]))
                    socks["a"].sendto(foreign, ("127.0.0.1", shared))
                    forged = bytearray(other_key.protect(_plain(seq, SSRC["b"], 9000)))
                    forged[-1] ^= 0x01  # the tag no longer matches: an injection attempt
                    socks["b"].sendto(bytes(forged), ("127.0.0.1", shared))
                for name in ("a", "b"):  # the real packet after the attack, same index
                    packet = senders[name].protect(_plain(seq, SSRC[name], LEVEL[name]))
                    socks[name].sendto(packet, ("127.0.0.1", shared))

            def counters(name: str) -> dict[str, int]:
                stats = bridge.bridge.media.stats(leg[name])["counters"]
                assert isinstance(stats, dict)
                return stats

            assert wait_for(lambda: all(counters(n)["datagrams"] == PACKETS + 1 for n in leg))
            for name in ("a", "b"):
                c = counters(name)
                assert (c["srtp_ok"], c["srtp_auth_failed"], c["srtp_replayed"]) == (
                    PACKETS,
                    1,
                    0,
                ), name
                assert c["srtp_malformed"] == 0
            g = bridge.bridge.ingest_counters()
            assert (g["srtp_auth_failed"], g["unmatched"], g["shared_fallbacks"]) == (2, 0, 0)
            for name in ("a", "b"):  # decrypted with its own key, its own audio only
                assert wait_for(lambda n=name: len(bridge.sink.captured(leg[n]).by_rtp_ts) >= 30)
                frames = bridge.sink.captured(leg[name]).by_rtp_ts.values()
                values = {int(v) for pcm in frames for v in np.unique(pcm)}
                assert values == {_decoded(LEVEL[name])}, name
    finally:
        for s in socks.values():
            s.close()
