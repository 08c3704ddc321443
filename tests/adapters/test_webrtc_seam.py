"""The aiortc seam the WHIP adapter builds on: every RTP packet after SRTP reaches the
tap, parsed, with the header fields the sender used, and none of them reaches aiortc's
own audio jitter buffer. Two real aiortc peer connections over loopback ICE/DTLS/SRTP;
an aiortc upgrade that moves the seam fails here (and in check_seam) loudly."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import aiortc
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpReceiver, RTCRtpSender
from aiortc.mediastreams import MediaStreamError
from aiortc.rtp import RtpPacket

from native.codec import ulaw_encode
from sip_bridge.adapters import webrtc_seam
from sip_bridge.adapters.webrtc_seam import SeamError, check_seam, ice_host_addresses, tap_receiver
from sip_bridge.bench.whip_client import FRAME, PcmTrack
from tests.sip.bridge_runner import load_speech

LOOPBACK = ("127.0.0.1",)


def test_the_pinned_aiortc_has_the_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    check_seam()
    assert aiortc.__version__ == webrtc_seam.AIORTC_VERSION
    monkeypatch.setattr(aiortc, "__version__", "9.9.9")
    with pytest.raises(SeamError, match=r"aiortc 9\.9\.9 installed"):
        check_seam()


def test_a_moved_seam_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def renamed(self: RTCRtpReceiver, packet: RtpPacket, arrival_ms: int) -> None:
        return None

    monkeypatch.setattr(RTCRtpReceiver, "_handle_rtp_packet", renamed)
    with pytest.raises(SeamError, match="changed"):
        check_seam()
    monkeypatch.delattr(RTCRtpReceiver, "_handle_rtp_packet")
    with pytest.raises(SeamError, match="gone"):
        check_seam()


Taps = list[tuple[RtpPacket, int]]


async def _pair(
    server: RTCPeerConnection, audio: np.ndarray, keep_aiortc: bool, frames: int
) -> tuple[Taps, RTCRtpReceiver, RTCRtpSender, int]:
    """A sender playing ``frames`` 20 ms frames of PCMU to a tapped receiver on
    ``server`` (which the caller closes)."""
    client = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    taps: list[tuple[RtpPacket, int]] = []
    track = PcmTrack(audio, loop=False)
    try:
        tx = client.addTransceiver(track, direction="sendonly")
        caps = RTCRtpSender.getCapabilities("audio")
        tx.setCodecPreferences([c for c in caps.codecs if c.mimeType == "audio/PCMU"])
        with ice_host_addresses(LOOPBACK):
            await client.setLocalDescription(await client.createOffer())
        rx = server.addTransceiver("audio", direction="recvonly")
        await server.setRemoteDescription(client.localDescription)
        tap_receiver(
            rx.receiver, lambda p, t: taps.append((p, t)), {0: 8000}, keep_aiortc=keep_aiortc
        )
        t0 = time.monotonic_ns()
        with ice_host_addresses(LOOPBACK):
            await server.setLocalDescription(await server.createAnswer())
        await client.setRemoteDescription(server.localDescription)
        deadline = time.monotonic() + 15
        while track.frames_sent < frames and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        track.stop()
        sent = await _packets_sent(tx.sender)
        while len(taps) < sent and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            sent = await _packets_sent(tx.sender)
        return taps, rx.receiver, tx.sender, t0
    finally:
        await client.close()


async def _packets_sent(sender: RTCRtpSender) -> int:
    stats = await sender.getStats()
    return sum(s.packetsSent for s in stats.values() if s.type == "outbound-rtp")


def test_the_tap_gets_every_decrypted_packet_and_aiortc_decodes_none(shared_dir: Path) -> None:
    audio = load_speech(shared_dir, 2.0)

    async def run() -> None:
        server = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            await check(*await _pair(server, audio, keep_aiortc=False, frames=60))
        finally:
            await server.close()

    async def check(taps: Taps, receiver: RTCRtpReceiver, sender: RTCRtpSender, t0: int) -> None:
        stats = await sender.getStats()
        out = next(s for s in stats.values() if s.type == "outbound-rtp")
        assert out.packetsSent >= 50 and len(taps) == out.packetsSent
        packets = [p for p, _ in taps]
        assert {p.payload_type for p in packets} == {0}
        assert {p.ssrc for p in packets} == {out.ssrc}
        seqs = [p.sequence_number for p in packets]
        assert all((b - a) % 65536 == 1 for a, b in itertools.pairwise(seqs))
        tss = [p.timestamp for p in packets]
        assert all((b - a) % (1 << 32) == FRAME for a, b in itertools.pairwise(tss))
        # the payload is the sender's G.711 of exactly our audio, frame by frame (FFmpeg's
        # encoder rounds a rare sample at a segment edge to the neighbouring code)
        n = min(len(packets), audio.size // FRAME)
        got = np.frombuffer(b"".join(p.payload for p in packets[:n]), np.uint8).astype(int)
        want = np.frombuffer(ulaw_encode(audio[: n * FRAME]), np.uint8).astype(int)
        assert got.size == want.size and np.abs(got - want).max() <= 1
        assert np.count_nonzero(got != want) < 0.03 * got.size
        arrivals = [t for _, t in taps]
        assert arrivals == sorted(arrivals) and t0 <= arrivals[0] <= time.monotonic_ns()
        # aiortc's RTCP statistics still see every packet (receiver reports stay right) ...
        inbound = next(s for s in (await receiver.getStats()).values() if s.type == "inbound-rtp")
        assert inbound.packetsReceived == len(taps)
        # ... but its jitter buffer and decoder never do: its track yields no frame (it
        # ends when the sender's RTCP BYE arrives, or waits)
        with pytest.raises((TimeoutError, MediaStreamError)):
            await asyncio.wait_for(receiver.track.recv(), 0.3)

    asyncio.run(run())


def test_keep_aiortc_passes_packets_on_to_its_own_decoder(shared_dir: Path) -> None:
    """The benchmark's baseline path: tapped and decoded by aiortc as well."""
    audio = load_speech(shared_dir, 1.0)

    async def run() -> None:
        server = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            taps, receiver, _, _ = await _pair(server, audio, keep_aiortc=True, frames=25)
            assert len(taps) >= 20
            frame = await asyncio.wait_for(receiver.track.recv(), 5)
            assert frame.sample_rate == 8000 and frame.samples == FRAME
        finally:
            await server.close()

    asyncio.run(run())
