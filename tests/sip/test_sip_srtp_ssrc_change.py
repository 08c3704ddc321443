"""An SDES-SRTP call through the bridge's SIP path whose caller changes SSRC mid-call
under the same key (a transfer or re-origination on the same 5-tuple, no re-INVITE):
a real UDP INVITE with RTP/SAVP, a=crypto and a=ssrc, answered with the shared RTP port
(with and without a=ssrc); libsrtp protects the caller's audio. The
leg follows each new SSRC after the old one goes quiet: its packets keep being received
and decrypted and its frames keep reaching the sink. Four SSRCs under one key decode;
an authentic fifth is dropped and counted (srtp_ssrc_limit), and the counters are on
the bridge's /metrics collector."""

from __future__ import annotations

import base64
import os
import socket
import time

import pytest
from bridge_runner import RunningBridge, free_udp_port, running_bridge, wait_for
from prometheus_client import CollectorRegistry, generate_latest
from test_shared_port_srtp import _decoded, _plain, _sender

from sip_bridge.bridge_metrics import IngestCollector
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription

FRAME = 160
N = 15  # packets per SSRC
GAP = 8  # ticks of silence between SSRCs: 160 ms, past the 80 ms quiet time
# (ssrc, first seq, first RTP timestamp, sample value): the first wraps its sequence
# (ROC 1 on the sender), the others start anywhere, each at ROC 0
STREAMS = [
    (0xA11CE, 65530, 0, 1200),
    (0xB0B, 1000, 1_000_000, -2500),
    (0xC0C, 30000, 2_000_000, 3300),
    (0xD0D, 5, 3_000_000, -700),
    (0xE0E, 200, 4_000_000, 6000),  # the fifth under one key: refused
]


def _request(
    method: str, call_id: str, sip_port: int, *, cseq: int, to_tag: str = "", sdp: bytes = b""
) -> bytes:
    to = f"<sip:monitor@127.0.0.1>{f';tag={to_tag}' if to_tag else ''}"
    kind = "Content-Type: application/sdp\r\n" if sdp else ""
    head = (
        f"{method} sip:monitor@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{sip_port};branch=z9hG4bK{call_id}{method}{cseq}\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=f{call_id}\r\nTo: {to}\r\n"
        f"Call-ID: {call_id}\r\nCSeq: {cseq} {method}\r\n"
        f"Contact: <sip:caller@127.0.0.1:{sip_port}>\r\n"
        f"{kind}Content-Length: {len(sdp)}\r\n\r\n"
    )
    return head.encode() + sdp


def _offer(rtp_port: int, key: bytes, ssrc: int, version: int = 1) -> bytes:
    ssrc_line = f"a=ssrc:{ssrc} cname:caller\r\n" if ssrc else ""
    return (
        f"v=0\r\no=t 1 {version} IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(key).decode()}\r\n"
        f"{ssrc_line}a=sendonly\r\n"
    ).encode()


def _answered(sip: socket.socket, bridge_port: int, request: bytes) -> SipResponse:
    """Send an INVITE and return its 200 (acknowledged)."""
    sip.sendto(request, ("127.0.0.1", bridge_port))
    while True:
        msg = parse_message(sip.recv(65535))
        assert isinstance(msg, SipResponse)
        assert msg.status < 300, msg.status
        if msg.status == 200:
            break
    tag = _to_tag(msg)
    cseq = int((msg.headers.get("CSeq") or "").split()[0])
    call_id = msg.headers.get("Call-ID") or ""
    sip_port = sip.getsockname()[1]
    sip.sendto(
        _request("ACK", call_id, sip_port, cseq=cseq, to_tag=tag), ("127.0.0.1", bridge_port)
    )
    return msg


def _to_tag(msg: SipResponse) -> str:
    return (msg.headers.get("To") or "").split("tag=", 1)[1].split(";", 1)[0]


class _Caller:
    """The caller's SRTP sender on one socket, paced at 20 ms per packet."""

    def __init__(self, sock: socket.socket, key: bytes, dest: tuple[str, int]) -> None:
        self.sock, self.dest = sock, dest
        self.sender = _sender(key)  # libsrtp: one ROC and index per SSRC, each from 0
        self.t0 = time.monotonic()
        self.tick = 0
        self.sent: dict[int, list[bytes]] = {}

    def stream(self, i: int) -> None:
        ssrc, seq0, ts0, value = STREAMS[i]
        for k in range(N):
            time.sleep(max(0.0, self.t0 + self.tick * 0.02 - time.monotonic()))
            packet = _plain((seq0 + k) & 0xFFFF, ssrc, value)
            packet = packet[:4] + (ts0 + k * FRAME).to_bytes(4, "big") + packet[8:]
            protected = self.sender.protect(packet)
            self.sent.setdefault(i, []).append(protected)
            self.sock.sendto(protected, self.dest)
            self.tick += 1
        self.tick += GAP


def _frames(bridge: RunningBridge, leg: str, i: int) -> dict[int, set[int]]:
    """Stream i's frames the sink got: RTP timestamp -> its sample values."""
    ts0 = STREAMS[i][2]
    got = bridge.sink.captured(leg).by_rtp_ts
    return {ts: set(pcm.tolist()) for ts, pcm in got.items() if ts0 <= ts < ts0 + N * FRAME}


def _exact(bridge: RunningBridge, leg: str, i: int) -> None:
    """Stream i reached the sink, its own audio only."""
    assert wait_for(lambda: len(_frames(bridge, leg, i)) >= N - 3), (i, _frames(bridge, leg, i))
    values = set().union(*_frames(bridge, leg, i).values())
    assert values == {_decoded(STREAMS[i][3])}, i


def _metrics(bridge: RunningBridge) -> str:
    registry = CollectorRegistry()
    registry.register(IngestCollector(bridge.bridge.ingest_counters))
    return generate_latest(registry).decode()


class _Call:
    """One SDES-SRTP call through the bridge's SIP path, on the shared RTP port."""

    def __init__(self, bridge: RunningBridge, ssrc: int) -> None:
        self.bridge, self.key = bridge, os.urandom(30)
        self.rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rtp.bind(("127.0.0.1", 0))
        self.sip.bind(("127.0.0.1", 0))
        self.sip.settimeout(5)
        self.sip_port = self.sip.getsockname()[1]
        sdp = _offer(self.rtp.getsockname()[1], self.key, ssrc)
        invite = _request("INVITE", "ssrcchg", self.sip_port, cseq=1, sdp=sdp)
        ok = _answered(self.sip, bridge.sip_port, invite)
        self.tag = _to_tag(ok)
        self.port = SessionDescription.parse(ok.body).media[0].port
        call = next(iter(bridge.calls().values()))
        self.leg = next(iter(call.legs.values())).leg_id
        self.caller = _Caller(self.rtp, self.key, ("127.0.0.1", self.port))

    def reinvite(self, ssrc: int, cseq: int) -> None:
        """A re-INVITE in the dialog: the same key, the offer's a=ssrc now ``ssrc``."""
        sdp = _offer(self.rtp.getsockname()[1], self.key, ssrc, version=cseq)
        req = _request("INVITE", "ssrcchg", self.sip_port, cseq=cseq, to_tag=self.tag, sdp=sdp)
        ok = _answered(self.sip, self.bridge.sip_port, req)
        assert SessionDescription.parse(ok.body).media[0].port == self.port

    def counters(self) -> dict[str, int]:
        stats = self.bridge.bridge.media.stats(self.leg)["counters"]
        assert isinstance(stats, dict)
        return stats

    def send(self, i: int) -> None:
        """Stream i, then wait until all its packets have reached the leg."""
        before = self.counters()["datagrams"]
        self.caller.stream(i)
        assert wait_for(lambda: self.counters()["datagrams"] == before + N), i

    def close(self) -> None:
        self.rtp.close()
        self.sip.close()


@pytest.mark.parametrize("keyed_by_ssrc", [True, False], ids=["addr+ssrc", "addr"])
def test_srtp_caller_changes_ssrc_mid_call_through_sip(keyed_by_ssrc: bool) -> None:
    """The parameter picks the leg's demux key on the shared port: address + a=ssrc (the
    leg takes each new SSRC as its own: demux_ssrc_follows) or the address alone (the
    source lock takes the new SSRC once the old one is quiet)."""
    shared = free_udp_port()
    with running_bridge(rtp_shared_port=shared, drain_timeout_s=0.5) as bridge:
        call = _Call(bridge, STREAMS[0][0] if keyed_by_ssrc else 0)
        try:
            assert call.port == shared
            received = []
            for i in range(len(STREAMS)):
                call.send(i)
                received.append(call.counters()["srtp_ok"])
            # audio kept flowing after each change: N more decrypted per SSRC, then none
            assert received == [N, 2 * N, 3 * N, 4 * N, 4 * N]
            for i in range(4):
                _exact(bridge, call.leg, i)
            assert _frames(bridge, call.leg, 4) == {}
            c = call.counters()
            assert c["locked_ssrc"] == STREAMS[3][0]
            assert (c["srtp_ssrc_limit"], c["srtp_auth_failed"], c["srtp_replayed"]) == (N, 0, 0)
            g = bridge.bridge.ingest_counters()
            follows = 3 if keyed_by_ssrc else 0
            assert (g["srtp_ssrc_limit"], g["demux_ssrc_follows"]) == (N, follows)
            assert (g["unmatched"], g["shared_fallbacks"]) == (0, 0)
            text = _metrics(bridge)
            assert f"callshield_ingest_srtp_ssrc_limit_total {float(N)}" in text
            assert f"callshield_ingest_demux_ssrc_follows_total {float(follows)}" in text
        finally:
            call.close()


def test_a_reinvite_naming_the_new_ssrc_keeps_the_legs_srtp_state() -> None:
    """After the leg followed A -> B, the peer's re-INVITE (same key) says a=ssrc:B, then
    a=ssrc:C before C starts. The leg is re-keyed in place: its counters keep growing,
    the key's per-SSRC table is kept (B's recorded packets stay replays, and the fifth
    SSRC is still refused), and C, D reach the sink."""
    with running_bridge(rtp_shared_port=free_udp_port(), drain_timeout_s=0.5) as bridge:
        call = _Call(bridge, STREAMS[0][0])
        try:
            call.send(0)
            call.send(1)  # followed: the leg's SSRC is B now
            call.reinvite(STREAMS[1][0], cseq=2)
            for packet in call.caller.sent[1]:  # B's packets again, recorded: replays
                call.rtp.sendto(packet, ("127.0.0.1", call.port))
            assert wait_for(lambda: call.counters()["datagrams"] == 3 * N)
            call.reinvite(STREAMS[2][0], cseq=3)  # announced before C starts
            for i in (2, 3, 4):
                call.send(i)
            c = call.counters()
            assert (c["srtp_ok"], c["srtp_replayed"], c["srtp_ssrc_limit"]) == (4 * N, N, N)
            assert c["srtp_auth_failed"] == 0
            for i in range(4):
                _exact(bridge, call.leg, i)
            assert _frames(bridge, call.leg, 4) == {}
            g = bridge.bridge.ingest_counters()
            assert (g["unmatched"], g["shared_fallbacks"], g["shared_rekey_refused"]) == (0, 0, 0)
            assert "callshield_ingest_srtp_replayed_total" in _metrics(bridge)
        finally:
            call.close()
