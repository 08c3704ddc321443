"""A re-INVITE that changes only the payload-type table (PCMU renumbered 0 -> 96,
telephone-event 101 -> 100, same address, port and SSRC) through the bridge's SIP path,
on a per-leg port and on the shared port, plain RTP and SDES-SRTP. The leg's stream is
updated in place (cs_ingest_set_pts), not re-created: its jitter-buffer and receive
counters go on, the audio plays on without a gap across the change, the new numbers are
decoded (events under 100 counted, 101 now unknown) and, with SRTP, the packets recorded
before the re-INVITE are still replays."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time

import numpy as np
import pylibsrtp
import pytest
from bridge_runner import RunningBridge, free_udp_port, running_bridge, wait_for
from test_shared_port_srtp import _decoded, _sender
from test_sip_srtp_ssrc_change import _answered, _request, _to_tag

from native.codec import ulaw_encode
from native.ingest import Ingest, PayloadType
from sip_bridge.media import MediaEngine, PortRange
from sip_bridge.sinks import CaptureSink
from sip_bridge.sip.sdp import SessionDescription

FRAME = 160
SSRC = 0x5EED
N = 25  # audio packets before and after the re-INVITE
BEFORE, AFTER = 1500, -2200  # sample values of the two halves
SEQ0, TS0 = 3000, 80_000


def _offer(rtp_port: int, audio_pt: int, event_pt: int, key: bytes | None, version: int) -> bytes:
    proto = "RTP/SAVP" if key else "RTP/AVP"
    crypto = (
        f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(key).decode()}\r\n"
        if key
        else ""
    )
    return (
        f"v=0\r\no=t 1 {version} IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} {proto} {audio_pt} {event_pt}\r\n"
        f"a=rtpmap:{audio_pt} PCMU/8000\r\na=rtpmap:{event_pt} telephone-event/8000\r\n"
        f"a=fmtp:{event_pt} 0-15\r\n{crypto}a=ssrc:{SSRC} cname:caller\r\na=sendonly\r\n"
    ).encode()


class _Caller:
    """One call's caller: SIP and RTP sockets on 127.0.0.1, 20 ms paced RTP."""

    def __init__(self, bridge: RunningBridge, key: bytes | None) -> None:
        self.bridge, self.key = bridge, key
        self.srtp: pylibsrtp.Session | None = _sender(key) if key else None
        self.rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rtp.bind(("127.0.0.1", 0))
        self.sip.bind(("127.0.0.1", 0))
        self.sip.settimeout(5)
        self.seq, self.ts, self.tick, self.t0 = SEQ0, TS0, 0, time.monotonic()
        self.sent: list[bytes] = []
        sdp = _offer(self.rtp.getsockname()[1], 0, 101, key, 1)
        ok = _answered(self.sip, bridge.sip_port, self._request("INVITE", 1, sdp))
        self.tag = _to_tag(ok)
        self.port = SessionDescription.parse(ok.body).media[0].port
        (call,) = bridge.calls().values()
        self.leg = next(iter(call.legs.values())).leg_id

    def _request(self, method: str, cseq: int, sdp: bytes) -> bytes:
        port = self.sip.getsockname()[1]
        return _request(
            method, "ptchange", port, cseq=cseq, to_tag=getattr(self, "tag", ""), sdp=sdp
        )

    def reinvite(self, audio_pt: int, event_pt: int, cseq: int) -> SessionDescription:
        sdp = _offer(self.rtp.getsockname()[1], audio_pt, event_pt, self.key, cseq)
        ok = _answered(self.sip, self.bridge.sip_port, self._request("INVITE", cseq, sdp))
        return SessionDescription.parse(ok.body)

    def _send(self, pt: int, payload: bytes, ts: int, marker: bool = False) -> None:
        time.sleep(max(0.0, self.t0 + self.tick * 0.02 - time.monotonic()))
        head = struct.pack("!BBHII", 0x80, pt | (0x80 if marker else 0), self.seq, ts, SSRC)
        packet = head + payload
        if self.srtp is not None:
            packet = self.srtp.protect(packet)
        self.sent.append(packet)
        self.rtp.sendto(packet, ("127.0.0.1", self.port))
        self.seq = (self.seq + 1) & 0xFFFF
        self.tick += 1

    def audio(self, pt: int, value: int, n: int) -> None:
        payload = ulaw_encode(np.full(FRAME, value, np.int16))
        for _ in range(n):
            self._send(pt, payload, self.ts)
            self.ts += FRAME

    def digit(self, pt: int, event: int) -> None:
        """One RFC 4733 event: its end packet three times (one event once deduplicated),
        timed at the audio packet before it."""
        for _ in range(3):
            self._send(pt, bytes([event, 0x80 | 10, 0x03, 0x20]), self.ts - FRAME)
            self.tick -= 1  # events take no audio time

    def close(self) -> None:
        self.rtp.close()
        self.sip.close()


def _stats(bridge: RunningBridge, leg: str) -> tuple[dict[str, int], dict[str, int]]:
    stats = bridge.bridge.media.stats(leg)
    counters = stats.pop("counters")
    assert isinstance(counters, dict)
    return {k: v for k, v in stats.items() if isinstance(v, int)}, counters


@pytest.mark.parametrize(
    ("shared", "srtp"),
    [(False, False), (True, False), (True, True)],
    ids=["per_leg", "shared_port", "shared_port_srtp"],
)
def test_a_payload_type_only_reinvite_keeps_the_stream(shared: bool, srtp: bool) -> None:
    settings: dict[str, object] = {"drain_timeout_s": 0.5}
    if shared:
        settings["rtp_shared_port"] = free_udp_port()
    with running_bridge(**settings) as bridge:
        caller = _Caller(bridge, os.urandom(30) if srtp else None)
        try:
            if shared:
                assert caller.port == settings["rtp_shared_port"]
            stream_id = bridge.on_loop(lambda: bridge.bridge.media._legs[caller.leg].stream_id)
            caller.audio(0, BEFORE, N)
            caller.digit(101, 5)
            assert wait_for(lambda: _stats(bridge, caller.leg)[1]["datagrams"] == N + 3)
            recorded = list(caller.sent)
            answer = caller.reinvite(96, 100, cseq=2)
            assert answer.media[0].port == caller.port
            assert answer.media[0].formats == ["96", "100"]
            caller.audio(96, AFTER, N)
            caller.digit(100, 7)
            caller.digit(101, 9)  # the old number: not in the table any more
            assert wait_for(lambda: _stats(bridge, caller.leg)[1]["datagrams"] == 2 * N + 9)
            jb, rx = _stats(bridge, caller.leg)
            # one stream all along: its counters cover both halves
            assert bridge.on_loop(lambda: bridge.bridge.media._legs[caller.leg].stream_id) == (
                stream_id
            )
            dropped = rx["srclock"]["probation_dropped"]  # the first packet(s), once
            assert jb["packets_received"] == rx["inserted"] == 2 * N + 9 - dropped
            assert jb["packets_in_order"] == 2 * N - dropped
            assert (jb["restarts"], jb["ssrc_changes"], jb["payload_type_changes"]) == (0, 0, 0)
            assert (jb["packets_dtmf"], jb["dtmf_events"]) == (6, 2)  # 5 under 101, 7 under 100
            assert jb["packets_unknown_pt"] == 3  # 9 under 101 after the re-INVITE
            assert jb["payload_table_updates"] == 1
            assert rx["datagrams"] == 2 * N + 9
            # the audio plays on across the change: every frame from the first played
            # one to the last is there, the first half's value then the second's
            want = {TS0 + k * FRAME: BEFORE if k < N else AFTER for k in range(2 * N)}
            got = bridge.sink.captured(caller.leg).by_rtp_ts
            # (the last few stay buffered: the buffer keeps its delay once input stops)
            assert wait_for(lambda: max(got, default=0) >= TS0 + (2 * N - 6) * FRAME)
            first = min(got)
            assert first <= TS0 + 3 * FRAME  # only probation's first packets missing
            for ts, value in want.items():
                if first <= ts <= max(got):
                    assert ts in got, ts
                    assert set(got[ts].tolist()) == {_decoded(value)}, ts
            assert jb["concealment_events"] == 0
            if srtp:  # the per-SSRC replay window was kept: recorded packets stay replays
                for packet in recorded:
                    caller.rtp.sendto(packet, ("127.0.0.1", caller.port))
                assert wait_for(lambda: _stats(bridge, caller.leg)[1]["srtp_replayed"] == N + 3)
                assert _stats(bridge, caller.leg)[1]["srtp_ok"] == 2 * N + 9
        finally:
            caller.close()


@pytest.mark.parametrize("shared", [False, True], ids=["per_leg", "shared_port"])
def test_a_table_the_buffer_was_not_built_for_still_recreates_the_stream(shared: bool) -> None:
    """Adding Opus (its decoder and wider ring slots are sized when the buffer is made)
    or L16 at 16 kHz (80 ring bytes per 2.5 ms unit, PCMU's buffer has 20) needs a new
    stream; renumbering PCMU does not."""
    ingest = Ingest(max_streams=4)
    low = free_udp_port()
    media = MediaEngine(
        ingest,
        PortRange(low, low + 2, 60.0),
        CaptureSink(),
        shared_port=free_udp_port() if shared else 0,
    )
    try:
        source = ("127.0.0.1", 40_000)
        pcmu = (PayloadType(0, "PCMU"), PayloadType(101, "telephone-event"))
        media.open_leg("rt.0", pcmu, source, remote=source, ssrc=SSRC)

        def stream_id() -> int:
            return media._legs["rt.0"].stream_id

        first = stream_id()
        renumbered = (PayloadType(96, "PCMU"), PayloadType(100, "telephone-event"))
        media.update_leg("rt.0", renumbered, source, remote=source, ssrc=SSRC)
        assert (stream_id(), media.stream_recreations) == (first, 0)
        assert ingest.stream_stats(first)["payload_table_updates"] == 1
        for table in (
            (PayloadType(96, "PCMU"), PayloadType(111, "opus", 48000, 2)),
            (PayloadType(97, "L16", 16000),),
        ):
            before = stream_id()
            media.update_leg("rt.0", table, source, remote=source, ssrc=SSRC)
            assert stream_id() != before
            assert media._legs["rt.0"].payload_types == table
        assert media.stream_recreations == 2
    finally:
        media.stop()
        ingest.close()
