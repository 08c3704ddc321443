"""The baseline of ``callshield bench webrtc``: a WHIP server on aiortc's own receiver
path (its audio ``JitterBuffer(capacity=16, prefetch=4)``, its decoder thread,
``RemoteStreamTrack.recv()``), on the same HTTP stack (FastAPI on uvicorn) and ICE
settings as the bridge's endpoint; every decoded frame is counted per session."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import dataclass, field

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpReceiver,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from fastapi import FastAPI, Request, Response

from sip_bridge.adapters.webrtc_seam import ice_host_addresses


@dataclass
class _Session:
    pc: RTCPeerConnection
    frames: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class AiortcWhipServer:
    """POST /v1/whip -> 201 + answer; DELETE /v1/whip/{id}. ``frames`` counts every
    frame aiortc's track yielded, over all sessions, ended ones included."""

    def __init__(self, codec: str, ice_addresses: tuple[str, ...]) -> None:
        self.codec = codec.lower()
        self.ice_addresses = ice_addresses
        self.sessions: dict[str, _Session] = {}
        self.frames_done = 0
        self.app = FastAPI(docs_url=None, redoc_url=None)
        self.app.add_api_route("/v1/whip", self._post, methods=["POST"])
        self.app.add_api_route("/v1/whip/{rid}", self._delete, methods=["DELETE"])

    @property
    def frames(self) -> int:
        return self.frames_done + sum(s.frames for s in self.sessions.values())

    async def _post(self, request: Request) -> Response:
        offer = (await request.body()).decode()
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        session = _Session(pc)
        tx = pc.addTransceiver("audio", direction="recvonly")
        caps = RTCRtpReceiver.getCapabilities("audio")
        assert caps is not None
        tx.setCodecPreferences(
            [c for c in caps.codecs if c.mimeType.lower() == f"audio/{self.codec}"]
        )
        await pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        session.tasks.append(asyncio.create_task(self._consume(session, tx.receiver.track)))
        with ice_host_addresses(self.ice_addresses):
            await pc.setLocalDescription(await pc.createAnswer())
        rid = secrets.token_urlsafe(12)
        self.sessions[rid] = session
        headers = {"Location": f"/v1/whip/{rid}"}
        return Response(pc.localDescription.sdp, 201, headers, media_type="application/sdp")

    async def _consume(self, session: _Session, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                await track.recv()
                session.frames += 1

    async def _delete(self, rid: str) -> Response:
        session = self.sessions.pop(rid, None)
        if session is None:
            return Response(status_code=404)
        self.frames_done += session.frames
        await session.pc.close()
        for task in session.tasks:
            task.cancel()
        return Response(status_code=200)

    async def close(self) -> None:
        for rid in list(self.sessions):
            await self._delete(rid)
