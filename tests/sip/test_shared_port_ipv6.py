"""The shared RTP port on IPv6: a media engine bound to ::1 keys its legs by their IPv6
source address:port (real UDP on ::1), each leg gets only its own audio, and an IPv6
source no leg expects is unmatched. The shared socket has the RTP bind address's family
(no second socket for the other family is opened)."""

from __future__ import annotations

import socket
import time

from bridge_runner import free_udp_port, wait_for
from test_rtp_shared_port import LEVEL, PCMU, _decoded, _rtp, _values

from native.ingest import Ingest
from sip_bridge.media import MediaEngine, PortRange
from sip_bridge.sinks import CaptureSink


def test_ipv6_legs_are_told_apart_by_source_on_the_shared_port() -> None:
    ingest = Ingest(max_streams=8)
    sink = CaptureSink()
    low = free_udp_port()
    media = MediaEngine(
        ingest, PortRange(low, low + 2, 60.0), sink, host="::1", shared_port=free_udp_port()
    )
    ingest.start()
    media.start()
    socks = {n: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) for n in ("a", "b", "c")}
    try:
        for s in socks.values():
            s.bind(("::1", 0))
        src = {n: s.getsockname()[:2] for n, s in socks.items()}
        shared = media.shared_port
        assert media.open_leg("v6a.0", PCMU, ("::1", 0), remote=src["a"]) == shared
        assert media.open_leg("v6b.0", PCMU, ("::1", 0), remote=src["b"], ssrc=0xB2) == shared
        for seq in range(1, 31):
            for name, s in socks.items():
                s.sendto(_rtp(seq, 0xB2 if name == "b" else 0xC3, LEVEL[name]), ("::1", shared))
            time.sleep(0.02)
        assert wait_for(lambda: len(sink.captured("v6a.0").by_rtp_ts) >= 20)
        assert wait_for(lambda: len(sink.captured("v6b.0").by_rtp_ts) >= 20)
        assert _values(sink, "v6a.0") == {_decoded(LEVEL["a"])}
        assert _values(sink, "v6b.0") == {_decoded(LEVEL["b"])}
        assert wait_for(lambda: ingest.counters()["unmatched"] == 30)  # every c datagram
        stats = media.stats("v6a.0")["counters"]
        assert isinstance(stats, dict) and stats["locked_addr"] == src["a"]
        assert media.counters()["shared_fallbacks"] == 0
    finally:
        media.stop()
        ingest.close()
        for s in socks.values():
            s.close()
