"""A WHIP publisher on aiortc (RFC 9725 client side), for the benchmark and the tests:
plays 8 kHz PCM in real time as a WebRTC audio track, POSTs the offer, applies the
answer, DELETEs the resource at the end."""

from __future__ import annotations

import asyncio
import fractions
import time
from dataclasses import dataclass, field
from urllib.parse import urljoin

import httpx
import numpy as np
import numpy.typing as npt
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from sip_bridge.adapters.webrtc_seam import ice_host_addresses

RATE = 8000
FRAME = 160  # 20 ms


class PcmTrack(MediaStreamTrack):
    """Plays ``audio`` (int16, 8 kHz mono) in real time, 20 ms per frame; with ``loop``
    it starts over, else it sends silence after the end. ``frames_sent`` counts."""

    kind = "audio"

    def __init__(self, audio: npt.NDArray[np.int16], loop: bool = True) -> None:
        super().__init__()
        usable = audio.size - audio.size % FRAME
        self.audio = np.ascontiguousarray(audio[:usable], dtype=np.int16)
        self.loop = loop
        self.frames_sent = 0
        self._start = 0.0

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        n = self.frames_sent
        if n == 0:
            self._start = time.monotonic()
        else:
            await asyncio.sleep(max(0.0, self._start + n * 0.02 - time.monotonic()))
        frames = self.audio.size // FRAME
        k = n % frames if self.loop else n
        chunk = self.audio[k * FRAME : (k + 1) * FRAME] if k < frames else np.zeros(FRAME, np.int16)
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk.tobytes())
        frame.pts = n * FRAME
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        self.frames_sent += 1
        return frame


@dataclass
class WhipPublisher:
    """One published session: the peer connection, the resource URL, the answer."""

    pc: RTCPeerConnection
    track: PcmTrack
    resource: str
    etag: str
    answer: str
    headers: dict[str, str] = field(default_factory=dict)

    async def delete(self, client: httpx.AsyncClient) -> int:
        r = await client.delete(self.resource, headers=self.headers)
        await self.pc.close()
        return r.status_code


class WhipError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"WHIP POST answered {status}: {body[:200]}")
        self.status = status


async def publish(
    client: httpx.AsyncClient,
    endpoint: str,
    token: str,
    audio: npt.NDArray[np.int16],
    *,
    codecs: tuple[str, ...] = ("PCMU",),
    ice_addresses: tuple[str, ...] = ("127.0.0.1",),
    extra_headers: dict[str, str] | None = None,
    loop: bool = True,
) -> WhipPublisher:
    """Offer one sendonly audio track (``codecs`` in order of preference) to
    ``endpoint``; raises WhipError when the POST is not answered 201."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    track = PcmTrack(audio, loop=loop)
    try:
        tx = pc.addTransceiver(track, direction="sendonly")
        caps = RTCRtpSender.getCapabilities("audio")
        assert caps is not None
        wanted = [n.lower() for n in codecs]
        prefs = [c for n in wanted for c in caps.codecs if c.mimeType.lower() == f"audio/{n}"]
        tx.setCodecPreferences(prefs)
        with ice_host_addresses(ice_addresses):
            await pc.setLocalDescription(await pc.createOffer())
        auth = {"Authorization": f"Bearer {token}"}
        headers = {**auth, "Content-Type": "application/sdp", **(extra_headers or {})}
        r = await client.post(endpoint, content=pc.localDescription.sdp, headers=headers)
        if r.status_code != 201:
            raise WhipError(r.status_code, r.text)
        await pc.setRemoteDescription(RTCSessionDescription(r.text, "answer"))
        resource = urljoin(endpoint, r.headers["location"])
        return WhipPublisher(pc, track, resource, r.headers.get("etag", ""), r.text, auth)
    except BaseException:
        await pc.close()
        raise
