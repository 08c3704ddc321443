"""The bridge's shared RTP port (setting rtp_shared_port): every SIP leg receives on one
UDP port, told apart in C by the source address:port its offer advertises and its
a=ssrc. Real UDP on 127.0.0.1 through the media engine, and a SIPp call (symmetric RTP
from its -mp port) through a real bridge."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
from bridge_runner import free_udp_port, load_speech, run_sipp, running_bridge, wait_for
from prometheus_client import CollectorRegistry, generate_latest
from rtp_pcap import write_rtp_pcap
from sip_fakes import metrics_text
from test_sipp import _matching_frames

from native.codec import ulaw_decode, ulaw_encode
from native.ingest import Ingest
from native.jitter import PayloadType
from sip_bridge.bridge_metrics import IngestCollector
from sip_bridge.media import MediaEngine, PortRange
from sip_bridge.sinks import CaptureSink
from sip_bridge.sip.offer_answer import negotiate
from sip_bridge.sip.sdp import SessionDescription

PCMU = (PayloadType(0, "PCMU"),)
LEVEL = {"a": 1000, "b": -3000, "c": 5000}  # each sender's constant sample value


def _rtp(seq: int, ssrc: int, value: int) -> bytes:
    payload = ulaw_encode(np.full(160, value, np.int16))
    head = bytes([0x80, 0]) + seq.to_bytes(2, "big") + (seq * 160).to_bytes(4, "big")
    return head + ssrc.to_bytes(4, "big") + payload


def _decoded(value: int) -> int:
    return int(ulaw_decode(ulaw_encode(np.full(1, value, np.int16)))[0])


def _senders(*names: str) -> dict[str, socket.socket]:
    out = {}
    for name in names:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        out[name] = s
    return out


def _send(socks: dict[str, socket.socket], port: int, packets: int, ssrc: dict[str, int]) -> None:
    for seq in range(1, packets + 1):
        for name, s in socks.items():
            s.sendto(
                _rtp(seq, ssrc.get(name, 0x5000 + len(name)), LEVEL[name]), ("127.0.0.1", port)
            )
        time.sleep(0.02)


def _engine() -> tuple[Ingest, MediaEngine, CaptureSink, int]:
    ingest = Ingest(max_streams=16)
    sink = CaptureSink()
    low = free_udp_port()
    shared = free_udp_port()
    media = MediaEngine(ingest, PortRange(low, low + 2, 60.0), sink, shared_port=shared)
    ingest.start()
    media.start()
    return ingest, media, sink, shared


def _values(sink: CaptureSink, leg: str) -> set[int]:
    frames = sink.captured(leg).by_rtp_ts.values()
    return {int(v) for pcm in frames for v in np.unique(pcm)}


def test_two_calls_on_the_shared_port_each_get_only_their_own_audio() -> None:
    ingest, media, sink, shared = _engine()
    socks = _senders("a", "b", "c")  # c: a source no leg expects
    try:
        addr = {k: s.getsockname()[:2] for k, s in socks.items()}
        port_a = media.open_leg("call1.0", PCMU, ("127.0.0.1", 0), remote=addr["a"])
        port_b = media.open_leg("call2.0", PCMU, ("127.0.0.1", 0), remote=addr["b"])
        assert port_a == port_b == shared == media.shared_port
        _send(socks, shared, 30, {"a": 0xA1, "b": 0xB2, "c": 0xC3})
        assert wait_for(lambda: len(sink.captured("call2.0").by_rtp_ts) >= 20)
        assert wait_for(lambda: len(sink.captured("call1.0").by_rtp_ts) >= 20)
        assert _values(sink, "call1.0") == {_decoded(LEVEL["a"])}
        assert _values(sink, "call2.0") == {_decoded(LEVEL["b"])}
        assert wait_for(lambda: ingest.counters()["unmatched"] == 30)  # every c datagram
        counters = media.shared_counters()
        assert counters is not None and counters["unmatched"] == 30
        assert media.counters() == {"shared_fallbacks": 0, "shared_rekey_refused": 0}
    finally:
        media.stop()
        ingest.close()
        for s in socks.values():
            s.close()


def test_legs_from_one_source_need_distinct_ssrcs_and_removal_frees_the_key() -> None:
    ingest, media, sink, shared = _engine()
    socks = _senders("a")
    try:
        src = socks["a"].getsockname()[:2]
        # a SIPREC-like pair from one address:port, told apart by a=ssrc
        assert media.open_leg("rec.0", PCMU, None, remote=src, ssrc=0x1111) == shared
        assert media.open_leg("rec.1", PCMU, None, remote=src, ssrc=0x2222) == shared
        _send(socks, shared, 25, {"a": 0x2222})
        assert wait_for(lambda: len(sink.captured("rec.1").by_rtp_ts) >= 15)
        assert sink.captured("rec.0").by_rtp_ts == {}  # the other SSRC's leg got nothing
        # a leg with the same key as a live one cannot share: it gets a port of its own
        own = media.open_leg("dup.0", PCMU, ("127.0.0.1", 0), remote=src, ssrc=0x1111)
        assert own != shared and media.counters()["shared_fallbacks"] == 1
        media.close_leg("dup.0")
        media.close_leg("rec.0")
        # removal freed (src, 0x1111): a new leg from that source is keyed on the shared port
        assert media.open_leg("new.0", PCMU, None, remote=src, ssrc=0x1111) == shared
        _send(socks, shared, 25, {"a": 0x1111})
        assert wait_for(lambda: len(sink.captured("new.0").by_rtp_ts) >= 15)
        assert _values(sink, "new.0") == {_decoded(LEVEL["a"])}
        assert media.counters()["shared_fallbacks"] == 1
    finally:
        media.stop()
        ingest.close()
        socks["a"].close()


def test_a_reinvite_moving_the_source_rekeys_the_leg() -> None:
    ingest, media, sink, shared = _engine()
    socks = _senders("a", "b")
    try:
        addr = {k: s.getsockname()[:2] for k, s in socks.items()}
        media.open_leg("call.0", PCMU, ("127.0.0.1", 0), remote=addr["a"])
        media.update_leg("call.0", PCMU, ("127.0.0.1", 0), remote=addr["b"])
        _send({"b": socks["b"]}, shared, 25, {"b": 0xB2})
        assert wait_for(lambda: len(sink.captured("call.0").by_rtp_ts) >= 15)
        assert _values(sink, "call.0") == {_decoded(LEVEL["b"])}
        _send({"a": socks["a"]}, shared, 5, {"a": 0xA1})  # the old source is no longer keyed
        assert wait_for(lambda: ingest.counters()["unmatched"] == 5)
    finally:
        media.stop()
        ingest.close()
        for s in socks.values():
            s.close()


def test_a_legs_source_changing_its_ssrc_is_followed_and_counted() -> None:
    """A transfer re-originates the media on the same 5-tuple with a new SSRC and no
    re-INVITE: the leg keyed by its offer's a=ssrc follows (ingest.h, rule 4)."""
    ingest, media, sink, shared = _engine()
    socks = _senders("a", "c")
    try:
        src = socks["a"].getsockname()[:2]
        media.open_leg("xfer.0", PCMU, None, remote=src, ssrc=0x1111)
        _send({"a": socks["a"]}, shared, 20, {"a": 0x1111})
        time.sleep(0.1)  # the old SSRC goes quiet
        for seq in range(500, 530):
            socks["a"].sendto(_rtp(seq, 0x2222, LEVEL["c"]), ("127.0.0.1", shared))
            socks["c"].sendto(_rtp(seq, 0x3333, LEVEL["c"]), ("127.0.0.1", shared))  # not its
            time.sleep(0.02)
        assert wait_for(lambda: ingest.counters()["demux_ssrc_follows"] == 1)
        assert wait_for(lambda: _values(sink, "xfer.0") == {_decoded(v) for v in (1000, 5000)})
        assert wait_for(lambda: ingest.counters()["unmatched"] == 30)
        stats = media.stats("xfer.0")["counters"]
        assert isinstance(stats, dict) and stats["locked_ssrc"] == 0x2222
        text = metrics_text(IngestCollector(ingest.counters))
        assert "callshield_ingest_demux_ssrc_follows_total 1.0" in text
    finally:
        media.stop()
        ingest.close()
        for s in socks.values():
            s.close()


def test_sipp_call_on_the_shared_port(shared_dir: Path, tmp_path: Path) -> None:
    track = write_rtp_pcap(tmp_path / "speech.pcap", load_speech(shared_dir, 2.0), ssrc=0xC0FFEE)
    shared = free_udp_port()
    with running_bridge(rtp_shared_port=shared) as bridge:
        result = run_sipp("uac_call.xml", bridge, tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        call = bridge.publisher.events[0][1]
        (leg,) = call.legs.values()
        assert leg.local_port == shared  # the SDP answer advertised the shared port
        good, bad = _matching_frames(bridge.sink.captured(leg.leg_id), track)
        assert bad == 0 and good >= 95  # 100 packets sent; probation drops the first
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stray:  # no leg's source
            for seq in range(3):
                stray.sendto(_rtp(seq, 0x5757, 0), ("127.0.0.1", shared))
        assert wait_for(lambda: bridge.bridge.ingest_counters()["unmatched"] >= 3)
        registry = CollectorRegistry()
        registry.register(IngestCollector(bridge.bridge.ingest_counters))
        text = generate_latest(registry).decode()
        assert "callshield_ingest_unmatched_total" in text
        assert "callshield_ingest_shared_fallbacks_total 0.0" in text


def test_the_offers_a_ssrc_is_the_legs_ssrc() -> None:
    sdp = (
        "v=0\r\no=- 1 1 IN IP4 192.0.2.7\r\ns=-\r\nc=IN IP4 192.0.2.7\r\nt=0 0\r\n"
        "m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=ssrc:305419896 cname:x\r\n"
        "m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=ssrc:notanumber\r\n"
    )
    first, second = negotiate(SessionDescription.parse(sdp.encode()))
    assert (first.remote_host, first.remote_port, first.ssrc) == ("192.0.2.7", 4000, 0x12345678)
    assert second.accepted and second.ssrc == 0  # unparsable: keyed by address alone


def test_a_reinvite_changing_only_the_ssrc_rekeys_the_leg_in_place() -> None:
    """A new a=ssrc alone keeps the leg's stream (its counters go on); a new SSRC whose
    key another leg holds is refused and counted, and the leg keeps its old key."""
    ingest, media, sink, shared = _engine()
    socks = _senders("a")
    try:
        src = socks["a"].getsockname()[:2]
        media.open_leg("rec.0", PCMU, None, remote=src, ssrc=0x1111)
        media.open_leg("rec.1", PCMU, None, remote=src, ssrc=0x2222)
        _send(socks, shared, 10, {"a": 0x1111})
        media.update_leg("rec.0", PCMU, None, remote=src, ssrc=0x2222)  # rec.1's key
        assert media.counters()["shared_rekey_refused"] == 1
        media.update_leg("rec.0", PCMU, None, remote=src, ssrc=0x3333)
        time.sleep(0.1)  # the old SSRC goes quiet
        _send(socks, shared, 25, {"a": 0x3333})

        def counters() -> dict[str, int]:
            stats = media.stats("rec.0")["counters"]
            assert isinstance(stats, dict)
            return stats

        assert wait_for(lambda: counters()["datagrams"] == 35)  # the same stream: 10 + 25
        assert counters()["locked_ssrc"] == 0x3333
        assert wait_for(lambda: len(sink.captured("rec.0").by_rtp_ts) >= 15)
        assert sink.captured("rec.1").by_rtp_ts == {}
        assert media.counters()["shared_rekey_refused"] == 1
    finally:
        media.stop()
        ingest.close()
        socks["a"].close()
