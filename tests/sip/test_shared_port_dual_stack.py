"""One dual-stack RTP socket for both address families: with the RTP bind address ``::``
the media engine's sockets set IPV6_V6ONLY off themselves (not left to the host's
net.ipv6.bindv6only), so the one shared port receives IPv4 peers (as ::ffff:a.b.c.d)
and IPv6 peers alike. An IPv4 peer is keyed by the plain IPv4 address of its offer's
``c=IN IP4`` line and matched (C stores a v4-mapped source as IPv4), an IPv6 peer by its
IPv6 address. Real UDP from 127.0.0.1 and ::1, through the media engine and through a
real bridge's SIP path; a per-leg port bound on ``::`` receives IPv4 too."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from bridge_runner import free_udp_port, running_bridge, wait_for
from test_rtp_shared_port import LEVEL, PCMU, _decoded, _rtp, _values

from native.ingest import Ingest, dual_stack, udp_socket
from sip_bridge.media import MediaEngine, PortRange, receives_from
from sip_bridge.sinks import CaptureSink
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription


def _bound(family: socket.AddressFamily) -> socket.socket:
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    return s


def test_v6only_is_set_explicitly_from_the_bind_address() -> None:
    for host, v6only in (("::", 0), ("::ffff:127.0.0.1", 0), ("::1", 1)):
        with udp_socket(host) as s:
            assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == v6only, host
            assert dual_stack(host) == (v6only == 0)
    with udp_socket("127.0.0.1") as s:
        assert s.family == socket.AF_INET and not dual_stack("127.0.0.1")
    assert receives_from("::", "127.0.0.1") and receives_from("::", "::1")
    assert not receives_from("::1", "127.0.0.1") and not receives_from("127.0.0.1", "::1")
    assert not receives_from("::1", "::ffff:127.0.0.1")  # a v4-mapped peer is IPv4


def test_ipv4_and_ipv6_legs_share_one_dual_stack_port(caplog: pytest.LogCaptureFixture) -> None:
    ingest = Ingest(max_streams=8)
    sink = CaptureSink()
    low = free_udp_port()
    with caplog.at_level(logging.INFO, logger="sip_bridge.media"):
        media = MediaEngine(
            ingest, PortRange(low, low + 2, 60.0), sink, host="::", shared_port=free_udp_port()
        )
    assert "dual-stack socket (IPV6_V6ONLY off)" in caplog.text
    ingest.start()
    media.start()
    socks = {
        "a": _bound(socket.AF_INET),  # offer c=IN IP4 127.0.0.1
        "b": _bound(socket.AF_INET6),  # offer c=IN IP6 ::1
        "c": _bound(socket.AF_INET),  # an IPv4 source no leg expects
    }
    try:
        src = {n: s.getsockname()[:2] for n, s in socks.items()}
        shared = media.shared_port
        assert media.open_leg("dsa.0", PCMU, ("127.0.0.1", 0), remote=src["a"]) == shared
        assert media.open_leg("dsb.0", PCMU, ("::1", 0), remote=src["b"], ssrc=0xB2) == shared
        for seq in range(1, 31):
            for name, s in socks.items():
                dest = "::1" if s.family == socket.AF_INET6 else "127.0.0.1"
                s.sendto(_rtp(seq, 0xB2 if name == "b" else 0xC3, LEVEL[name]), (dest, shared))
            time.sleep(0.02)
        assert wait_for(lambda: len(sink.captured("dsa.0").by_rtp_ts) >= 20)
        assert wait_for(lambda: len(sink.captured("dsb.0").by_rtp_ts) >= 20)
        assert _values(sink, "dsa.0") == {_decoded(LEVEL["a"])}
        assert _values(sink, "dsb.0") == {_decoded(LEVEL["b"])}
        assert wait_for(lambda: ingest.counters()["unmatched"] == 30)  # every c datagram
        for leg, name in (("dsa.0", "a"), ("dsb.0", "b")):
            stats = media.stats(leg)["counters"]
            assert isinstance(stats, dict)
            assert stats["locked_addr"] == src[name]  # a: plain 127.0.0.1, not ::ffff:
            assert stats["datagrams"] == 30
        assert media.counters()["shared_fallbacks"] == 0
    finally:
        media.stop()
        ingest.close()
        for s in socks.values():
            s.close()


def test_a_per_leg_port_bound_on_the_ipv6_wildcard_receives_ipv4() -> None:
    ingest = Ingest(max_streams=4)
    sink = CaptureSink()
    low = free_udp_port()
    media = MediaEngine(ingest, PortRange(low, low + 2, 60.0), sink, host="::")
    ingest.start()
    media.start()
    with _bound(socket.AF_INET) as sender:
        try:
            port = media.open_leg("dsp.0", PCMU, sender.getsockname()[:2])
            for seq in range(1, 31):
                sender.sendto(_rtp(seq, 0xA1, LEVEL["a"]), ("127.0.0.1", port))
                time.sleep(0.02)
            assert wait_for(lambda: len(sink.captured("dsp.0").by_rtp_ts) >= 20)
            assert _values(sink, "dsp.0") == {_decoded(LEVEL["a"])}
        finally:
            media.stop()
            ingest.close()


def _invite(call_id: str, ip: str, host: str, rtp_port: int, sip_port: int) -> bytes:
    sdp = (
        f"v=0\r\no=t 1 1 IN {ip} {host}\r\ns=-\r\nc=IN {ip} {host}\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendonly\r\n"
    ).encode()
    head = (
        f"INVITE sip:monitor@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{sip_port};branch=z9hG4bK{call_id}\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=f{call_id}\r\nTo: <sip:monitor@127.0.0.1>\r\n"
        f"Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{sip_port}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n"
    )
    return head.encode() + sdp


def test_ip4_and_ip6_offers_through_sip_reach_their_calls_on_one_port() -> None:
    shared = free_udp_port()
    socks = {
        "a": _bound(socket.AF_INET),
        "b": _bound(socket.AF_INET6),
        "sip": _bound(socket.AF_INET),
    }
    try:
        socks["sip"].settimeout(5)
        sip_port = socks["sip"].getsockname()[1]
        with running_bridge(rtp_host="::", rtp_shared_port=shared) as bridge:
            for name, ip, host in (("a", "IP4", "127.0.0.1"), ("b", "IP6", "::1")):
                rtp_port = socks[name].getsockname()[1]
                invite = _invite(f"ds{name}", ip, host, rtp_port, sip_port)
                socks["sip"].sendto(invite, ("127.0.0.1", bridge.sip_port))
                while True:
                    msg = parse_message(socks["sip"].recv(65535))
                    assert isinstance(msg, SipResponse) and msg.status < 300, msg
                    if msg.status == 200:
                        answer = SessionDescription.parse(msg.body)
                        assert answer.media[0].port == shared
                        break
            calls = {c.sip_call_id: c for c in bridge.calls().values()}
            leg = {n: next(iter(calls[f"ds{n}"].legs.values())).leg_id for n in ("a", "b")}
            for seq in range(1, 31):
                socks["a"].sendto(_rtp(seq, 0xA1, LEVEL["a"]), ("127.0.0.1", shared))
                socks["b"].sendto(_rtp(seq, 0xB2, LEVEL["b"]), ("::1", shared))
                time.sleep(0.02)
            for name in ("a", "b"):
                assert wait_for(lambda n=name: len(bridge.sink.captured(leg[n]).by_rtp_ts) >= 20)
                assert _values(bridge.sink, leg[name]) == {_decoded(LEVEL[name])}
            g = bridge.bridge.ingest_counters()
            assert (g["unmatched"], g["shared_fallbacks"]) == (0, 0)
    finally:
        for s in socks.values():
            s.close()
