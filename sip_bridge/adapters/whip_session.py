"""WHIP sessions: one aiortc peer connection per published call, its audio RTP pushed
into native legs through the seam (:mod:`sip_bridge.adapters.webrtc_seam`).

:class:`WhipSessions` negotiates an offer (audio only: each sending audio m-line is a
leg; video m-lines are answered inactive), opens the call on the controller, taps each
audio receiver before any RTP can arrive (taps go in before ``setLocalDescription``
starts ICE), and ends the session on whichever comes first: DELETE from the client,
the peer connection failing or closing, or the bridge ending the call (RTP timeout,
drain), which it notices by the legs closing. Everything runs on the bridge's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc import sdp as aiortc_sdp
from aiortc.rtcrtpparameters import RTCRtpCodecCapability, RTCRtpCodecParameters
from aiortc.rtcrtptransceiver import RTCRtpTransceiver
from aiortc.rtp import RtpPacket

from detectors.alert_schema import LegRole
from sip_bridge.adapters.webrtc_seam import (
    OnPacket,
    codec_preferences,
    ice_host_addresses,
    payload_types,
    tap_receiver,
)
from sip_bridge.calls import CallController, CallSetup, PushedLegSpec
from sip_bridge.media import PushedLeg
from sip_bridge.tenant import Hint

log = logging.getLogger(__name__)
MAX_AUDIO_LEGS = 2
WATCH_PERIOD_S = 0.25


class OfferError(ValueError):
    """The offer cannot be answered (the HTTP layer answers 400 with the message)."""


@dataclass(slots=True)
class WhipStats:
    offers: int = 0
    answered: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)
    packets: int = 0
    packets_dropped: int = 0  # the leg had closed or the jitter buffer refused it

    def as_dict(self, live: int) -> dict[str, object]:
        return {
            "offers": self.offers,
            "answered": self.answered,
            "refused": dict(self.refused),
            "ended": dict(self.ended),
            "live": live,
            "packets": self.packets,
            "packets_dropped": self.packets_dropped,
        }


@dataclass(frozen=True, slots=True)
class PublishRequest:
    """What the HTTP layer learnt besides the SDP: roles per audio m-line (one value
    applies to every leg) and the call's metadata."""

    roles: tuple[LegRole, ...] = (LegRole.EXTERNAL,)
    ani: str = ""
    dnis: str = ""
    correlation_id: str | None = None
    external_ids: dict[str, str] = field(default_factory=dict)
    tenant_hints: tuple[Hint, ...] = ()  # X-CallShield-Tenant / ?tenant= (sip_bridge.tenant)


@dataclass(slots=True)
class WhipSession:
    resource_id: str
    etag: str
    pc: RTCPeerConnection
    call_id: str
    legs: dict[str, PushedLeg]
    answer_sdp: str = ""
    watcher: asyncio.Task[None] | None = None


class WhipSessions:
    def __init__(
        self,
        controller: CallController,
        codecs: Sequence[str],
        ice_addresses: tuple[str, ...] = (),
        keep_aiortc: bool = False,
    ) -> None:
        self.controller = controller
        self.codecs = tuple(codecs)
        self.ice_addresses = ice_addresses
        self.keep_aiortc = keep_aiortc  # the benchmark's baseline: aiortc decodes too
        self.stats = WhipStats()
        self.sessions: dict[str, WhipSession] = {}
        self._tasks: set[asyncio.Future[bool]] = set()
        self._watchers: set[asyncio.Task[None]] = set()

    async def publish(self, offer_sdp: str, request: PublishRequest) -> WhipSession:
        """Answer ``offer_sdp``; raises OfferError (bad offer) or CapacityError."""
        self.stats.offers += 1
        audio = _audio_mlines(offer_sdp)
        roles = _roles_per_leg(request.roles, len(audio))
        preferences = codec_preferences(self.codecs)
        if not preferences:
            raise OfferError(f"none of the codecs {list(self.codecs)} is decodable here")
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            audio_tx = []
            for m in audio:  # taken by the offer's audio m-lines in order
                tx = pc.addTransceiver("audio", direction="recvonly")
                tx.setCodecPreferences([_chosen(m, preferences, self.codecs)])
                audio_tx.append(tx)
            try:
                await pc.setRemoteDescription(RTCSessionDescription(offer_sdp, "offer"))
            except Exception as exc:  # aiortc raises ValueError/OperationError/...
                raise OfferError(f"offer not acceptable: {exc or type(exc).__name__}") from None
            for tx in pc.getTransceivers():
                if tx.kind != "audio":
                    tx.direction = "inactive"  # listen-only, audio only
            answer = await pc.createAnswer()
            assert answer is not None
            negotiated = _negotiated(answer.sdp)
            session = self._open_call(pc, audio_tx, negotiated, roles, request)
            try:
                with ice_host_addresses(self.ice_addresses):
                    await pc.setLocalDescription(answer)
            except BaseException:
                self.controller.end_call(session.call_id, "whip_error")
                raise
        except BaseException:
            await pc.close()
            raise
        session.answer_sdp = pc.localDescription.sdp
        self.sessions[session.resource_id] = session
        pc.on("connectionstatechange", lambda: self._state_changed(session))
        session.watcher = asyncio.create_task(self._watch(session), name="whip-watch")
        self._watchers.add(session.watcher)
        session.watcher.add_done_callback(self._watchers.discard)
        self.stats.answered += 1
        return session

    def _open_call(
        self,
        pc: RTCPeerConnection,
        audio_tx: list[RTCRtpTransceiver],
        negotiated: dict[str, list[RTCRtpCodecParameters]],
        roles: tuple[LegRole, ...],
        request: PublishRequest,
    ) -> WhipSession:
        specs = []
        for tx, role in zip(audio_tx, roles, strict=True):
            mid = tx.mid or ""
            pts = payload_types(negotiated.get(mid, []))
            audio_pts = [p for p in pts if p.codec not in ("CN", "telephone-event")]
            if not audio_pts:
                raise OfferError(f"audio m-line {mid!r}: no codec in common with {self.codecs}")
            specs.append(PushedLegSpec(mid, role, "api", audio_pts[0].codec, pts))
        setup = CallSetup(
            kind="webrtc",
            ani=request.ani,
            dnis=request.dnis,
            correlation_id=request.correlation_id,
            external_ids=dict(request.external_ids),
            tenant_hints=request.tenant_hints,
        )
        call, legs = self.controller.start_pushed_call(setup, specs)  # CapacityError
        for tx, spec in zip(audio_tx, specs, strict=True):
            rates = {p.pt: p.clock_rate for p in spec.payload_types}
            tap_receiver(
                tx.receiver, self._pusher(legs[spec.label]), rates, keep_aiortc=self.keep_aiortc
            )
        resource = secrets.token_urlsafe(16)
        return WhipSession(resource, f'"{secrets.token_hex(8)}"', pc, call.call_id, legs)

    def _pusher(self, leg: PushedLeg) -> OnPacket:
        stats = self.stats

        def on_packet(packet: RtpPacket, arrival_ns: int) -> None:
            rc = leg.push_payload(
                packet.payload_type,
                packet.sequence_number,
                packet.timestamp,
                packet.ssrc,
                packet.payload,
                arrival_ns,
                marker=bool(packet.marker),
            )
            if rc < 0:
                stats.packets_dropped += 1
            else:
                stats.packets += 1

        return on_packet

    async def end(self, resource_id: str, reason: str) -> bool:
        """End a session and its call; False when there is no such session."""
        session = self.sessions.pop(resource_id, None)
        if session is None:
            return False
        if session.call_id in self.controller.calls:
            self.controller.end_call(session.call_id, reason)
        self.stats.ended[reason] += 1
        if session.watcher is not None and session.watcher is not asyncio.current_task():
            session.watcher.cancel()
        await session.pc.close()
        return True

    async def close_all(self, reason: str) -> None:
        """End every session, and wait for closes already under way (a watcher or a
        state change may be inside ``pc.close()``), so nothing is left pending."""
        watchers = [s.watcher for s in self.sessions.values() if s.watcher is not None]
        for resource_id in list(self.sessions):
            await self.end(resource_id, reason)
        pending: list[asyncio.Future[Any]] = [*self._watchers, *self._tasks, *watchers]
        await asyncio.gather(*pending, return_exceptions=True)

    def _state_changed(self, session: WhipSession) -> None:
        state = session.pc.connectionState
        if state in ("failed", "closed") and session.resource_id in self.sessions:
            reason = "ice_failed" if state == "failed" else "peer_closed"
            task = asyncio.ensure_future(self.end(session.resource_id, reason))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _watch(self, session: WhipSession) -> None:
        """The bridge ended the call (RTP timeout, drain): close the peer connection."""
        with contextlib.suppress(asyncio.CancelledError):
            while session.resource_id in self.sessions:
                await asyncio.sleep(WATCH_PERIOD_S)
                if session.call_id not in self.controller.calls or all(
                    leg.closed for leg in session.legs.values()
                ):
                    await self.end(session.resource_id, "bridge_ended")
                    return


def _audio_mlines(offer_sdp: str) -> list[aiortc_sdp.MediaDescription]:
    try:
        description = aiortc_sdp.SessionDescription.parse(offer_sdp)
    except Exception as exc:  # aiortc's parser raises whatever the text provokes
        raise OfferError(f"unparsable SDP: {exc or type(exc).__name__}") from None
    audio = [m for m in description.media if m.kind == "audio"]
    if not audio:
        raise OfferError("the offer has no audio m-line")
    if len(audio) > MAX_AUDIO_LEGS:
        raise OfferError(f"at most {MAX_AUDIO_LEGS} audio m-lines, got {len(audio)}")
    for m in audio:
        if m.direction not in (None, "sendonly", "sendrecv"):
            raise OfferError(f"a WHIP client publishes: audio m-line is {m.direction}")
    return audio


def _chosen(
    m: aiortc_sdp.MediaDescription,
    preferences: list[RTCRtpCodecCapability],
    names: tuple[str, ...],
) -> RTCRtpCodecCapability:
    """Our most preferred codec among those the m-line offers. The answer carries only
    that one, so the sender cannot pick another and the leg's codec is what arrives."""
    offered = {(c.mimeType.lower(), c.clockRate) for c in m.rtp.codecs}
    for cap in preferences:
        if (cap.mimeType.lower(), cap.clockRate) in offered:
            return cap
    shown = sorted({c.mimeType.partition("/")[2] for c in m.rtp.codecs})
    raise OfferError(f"audio m-line: no codec in common: offered {shown}, accepted {list(names)}")


def _roles_per_leg(roles: tuple[LegRole, ...], legs: int) -> tuple[LegRole, ...]:
    if len(roles) == 1:
        return roles * legs
    if len(roles) != legs:
        raise OfferError(f"{len(roles)} roles given for {legs} audio m-lines")
    return roles


def _negotiated(answer_sdp: str) -> dict[str, list[RTCRtpCodecParameters]]:
    description = aiortc_sdp.SessionDescription.parse(answer_sdp)
    return {m.rtp.muxId: list(m.rtp.codecs) for m in description.media if m.kind == "audio"}
