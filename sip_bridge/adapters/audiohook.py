"""Genesys Cloud AudioHook Monitor, listen-only (protocol version 2), at
``wss://<bridge>/v1/audiohook``.

Genesys (the client) opens a WebSocket with ``Audiohook-Organization-Id``,
``Audiohook-Correlation-Id``, ``Audiohook-Session-Id`` and ``X-API-KEY``, signed with
HTTP Message Signatures under the integration's client secret
(:mod:`sip_bridge.adapters.audiohook_signature`). The API key (settings
``audiohook_api_key``, none = adapter off) and, when ``audiohook_client_secret`` is set,
the signature are checked before the upgrade: wrong -> HTTP 403; a missing session
header -> 400; draining -> 503.

Then JSON text messages (``version`` "2", ``id`` = the session id, ``seq`` counting 1, 2,
... each way, ``serverseq``/``clientseq`` acknowledging the other side, ``position`` the
client's stream position as an ISO 8601 duration ``PT1.23S``). The client sends
``open`` (organizationId, conversationId, participant {ani, dnis}, the media it offers);
we answer ``opened`` with the one we take: PCMU or L16 (little-endian, as Genesys sends
it) at 8 kHz, preferably both channels ``["external", "internal"]``; each channel is a
pushed leg with that role (role_source ``vendor_track``). The call's tenant: ``tenant``
in the open's ``inputVariables`` (set per call by the Architect flow), else in its
``customConfig`` (the integration's configuration JSON, set by the Genesys admin): an
explicit value of origin ``audiohook_open`` (:mod:`sip_bridge.tenant`; a refused one is
counted and the next, or the DNIS mapping or default, applies). ``ping`` -> ``pong``;
``paused``/``resumed`` (secure pause: the call is paused, its audio and DTMF dropped in
C, the gap counts as a pause and the next audio starts a fresh sequence run);
``discarded`` (audio the client dropped: the position jumps, the jitter buffer sees the
gap); ``update`` and ``error`` are counted; ``close`` -> ``closed``, the call ends.

Binary messages are audio: samples interleaved by channel (external, internal), written
at the running sample position, which client positions, ``discarded`` and ``resumed``
move forward. Anything wrong (bad JSON, a seq out of order, an unknown message type,
audio before ``opened``, a frame size that is not whole samples, a flood) makes us
send ``disconnect`` with reason ``error`` (``unauthorized`` for an organization that
does not match its header) and close the socket with a code; the call ends; other
calls never notice. A call the bridge ends by itself gets ``disconnect`` ``completed``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import re
import secrets
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, WebSocket

from detectors.alert_schema import LegRole
from native.ingest import PayloadType
from sip_bridge.adapters.audiohook_signature import NonceCache, SignatureError, verify
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.adapters.ws_common import (
    AdapterStats,
    CloseCode,
    SessionError,
    bounded_text,
    refuse,
)
from sip_bridge.adapters.ws_session import MediaSocketSession
from sip_bridge.calls import CallController, CallSetup, PushedLegSpec
from sip_bridge.settings import Settings
from sip_bridge.tenant import Hint, hints_of

log = logging.getLogger(__name__)
PATH = "/v1/audiohook"
RATE = 8000
MAX_TEXT = 64 * 1024
CLIENT_TYPES = frozenset(
    {"open", "close", "ping", "paused", "resumed", "discarded", "update", "error"}
)
ROLES = {"external": LegRole.EXTERNAL, "internal": LegRole.INTERNAL}
FORMATS = {  # format -> (payload types, payload type, bytes per sample)
    "PCMU": ((PayloadType(0, "PCMU"),), 0, 1),
    "L16": ((PayloadType(96, "L16LE", RATE),), 96, 2),  # little-endian, as sent
}
_DURATION = re.compile(r"PT(\d{1,9})(?:\.(\d{1,9}))?S")
HEADERS = ("audiohook-organization-id", "audiohook-session-id", "audiohook-correlation-id")


def samples_of(duration: object) -> int:
    """``PT1.5S`` -> 12000 samples at 8 kHz (SessionError for anything else)."""
    m = _DURATION.fullmatch(duration) if isinstance(duration, str) else None
    if m is None:
        raise SessionError(CloseCode.BAD_DATA, "bad_duration", "bad duration")
    fraction = (m.group(2) or "").ljust(9, "0")
    return (int(m.group(1)) * 1_000_000_000 + int(fraction)) * RATE // 1_000_000_000


def choose_media(offers: object) -> dict[str, Any] | None:
    """The offer we take: PCMU or L16 audio at 8 kHz with known channels, the one with
    the most channels first (both legs), else the first. None if none fits."""
    if not isinstance(offers, list):
        raise SessionError(CloseCode.BAD_DATA, "bad_open", "media must be a list")
    best: dict[str, Any] | None = None
    for offer in offers[:16]:
        if not isinstance(offer, dict):
            continue
        channels = offer.get("channels")
        if (
            offer.get("type") != "audio"
            or offer.get("format") not in FORMATS
            or offer.get("rate") != RATE  # other rates: once the native resampler lands
            or not isinstance(channels, list)
            or not channels
            or any(c not in ROLES for c in channels)
            or len(set(channels)) != len(channels)
        ):
            continue
        if best is None or len(channels) > len(best["channels"]):
            best = {"type": "audio", "format": offer["format"], "channels": channels, "rate": RATE}
    return best


class AudioHookSession(MediaSocketSession):
    def __init__(
        self,
        websocket: WebSocket,
        controller: CallController,
        settings: Settings,
        stats: AdapterStats,
    ) -> None:
        super().__init__(websocket, controller, settings, stats)
        headers = websocket.headers
        self.session_id = headers["audiohook-session-id"]
        self.organization_id = headers["audiohook-organization-id"]
        self.correlation_id = headers["audiohook-correlation-id"]
        self.clientseq = 0
        self.serverseq = 0
        self.state = "preparing"  # -> active <-> paused -> closing
        self.legs: list[Packetizer] = []
        self.sample_bytes = 1
        self.position = 0  # samples per channel where the next audio frame starts
        self.max_frame = 0

    async def send(self, kind: str, parameters: dict[str, Any]) -> None:
        self.serverseq += 1
        message = {
            "version": "2",
            "type": kind,
            "seq": self.serverseq,
            "clientseq": self.clientseq,
            "id": self.session_id,
            "parameters": parameters,
        }
        await self.ws.send_text(json.dumps(message))

    async def on_fail(self, error: SessionError) -> None:
        if self.state != "closing":
            reason = "unauthorized" if error.stat == "unauthorized" else "error"
            await self.send("disconnect", {"reason": reason, "info": error.reason})

    async def on_call_ended(self, reason: str) -> None:
        if self.state != "closing":
            await self.send("disconnect", {"reason": "completed", "info": f"call ended: {reason}"})

    async def on_text(self, text: str, now: float) -> None:
        if len(text) > MAX_TEXT:
            raise SessionError(CloseCode.TOO_BIG, "oversized_message", "message too large")
        try:
            msg = json.loads(text)
        except ValueError:
            raise SessionError(CloseCode.BAD_DATA, "bad_json", "invalid JSON") from None
        if not isinstance(msg, dict):
            raise SessionError(CloseCode.BAD_DATA, "bad_message", "not an AudioHook message")
        seq, serverseq, kind = msg.get("seq"), msg.get("serverseq"), msg.get("type")
        params = msg.get("parameters")
        if (
            msg.get("version") != "2"
            or not isinstance(kind, str)
            or not isinstance(params, dict)
            or type(seq) is not int
            or type(serverseq) is not int
        ):
            raise SessionError(CloseCode.BAD_DATA, "bad_message", "not an AudioHook v2 message")
        if msg.get("id") != self.session_id:
            raise SessionError(CloseCode.PROTOCOL, "bad_session_id", "session id mismatch")
        if seq != self.clientseq + 1:
            raise SessionError(CloseCode.PROTOCOL, "bad_seq", "seq not monotonically increasing")
        self.clientseq = seq
        if not 0 <= serverseq <= self.serverseq:
            raise SessionError(CloseCode.PROTOCOL, "bad_serverseq", "serverseq ahead of ours")
        if kind not in CLIENT_TYPES:
            raise SessionError(CloseCode.PROTOCOL, "unknown_message", f"'{kind[:40]}' unknown")
        self.stats.events[kind] += 1
        self._move_to(samples_of(msg.get("position")))
        await getattr(self, f"_on_{kind}")(params)

    def _move_to(self, position: int) -> None:
        """Audio the client counted but never sent (discarded, paused): a gap."""
        if position > self.position and self.state != "preparing":
            self.position = position

    async def _on_open(self, params: dict[str, Any]) -> None:
        if self.state != "preparing":
            raise SessionError(CloseCode.PROTOCOL, "unexpected_open", "open after open")
        org = bounded_text(params.get("organizationId"), "organizationId")
        if org.lower() != self.organization_id.lower():
            raise SessionError(CloseCode.POLICY, "unauthorized", "organizationId mismatch")
        participant = params.get("participant") or {}
        if not isinstance(participant, dict):
            raise SessionError(CloseCode.BAD_DATA, "bad_open", "participant must be an object")
        conversation = bounded_text(params.get("conversationId"), "conversationId")
        media = choose_media(params.get("media"))
        if media is None:
            raise SessionError(CloseCode.UNSUPPORTED, "unsupported_media", "no media we take")
        pts, pt, self.sample_bytes = FORMATS[media["format"]]
        setup = CallSetup(
            kind="audiohook",
            ani=bounded_text(participant.get("ani"), "ani"),
            dnis=bounded_text(participant.get("dnis"), "dnis"),
            correlation_id=conversation or self.correlation_id,
            external_ids={
                "genesys": conversation,  # risk-by-external-id's system name (issue 12)
                "genesys_conversation": conversation,
                "audiohook_session": self.session_id,
                "audiohook_correlation": self.correlation_id,
                "genesys_organization": org,
            },
            tenant_hints=_tenant_hints(params),
        )
        specs = [
            PushedLegSpec(c, ROLES[c], "vendor_track", media["format"], pts)
            for c in media["channels"]
        ]
        handles = self.start_call(setup, specs)
        self.legs = [Packetizer(handles[c], pt, RATE, self.sample_bytes) for c in media["channels"]]
        frame = self.sample_bytes * len(self.legs)
        self.max_frame = RATE * self.settings.ws_max_chunk_ms // 1000 * frame
        self.state = "active"
        await self.send("opened", {"media": [media], "startPaused": False})

    async def _on_ping(self, params: dict[str, Any]) -> None:
        await self.send("pong", {})

    async def _on_paused(self, params: dict[str, Any]) -> None:
        if self.state == "active":
            self.state = "paused"
            self.set_paused(True, "audiohook_paused")

    async def _on_resumed(self, params: dict[str, Any]) -> None:
        self._discarded(params)
        if self.state == "paused":
            self.state = "active"
            for leg in self.legs:  # a fresh sequence run: the pause is not loss
                leg.ssrc = secrets.randbits(32)
            self.set_paused(False, "audiohook_resumed")

    async def _on_discarded(self, params: dict[str, Any]) -> None:
        self._discarded(params)

    def _discarded(self, params: dict[str, Any]) -> None:
        if "start" in params or "discarded" in params:
            self._move_to(samples_of(params.get("start")) + samples_of(params.get("discarded")))

    async def _on_update(self, params: dict[str, Any]) -> None:
        pass  # a language change: nothing for a monitor

    async def _on_error(self, params: dict[str, Any]) -> None:
        code = params.get("code")
        log.info("AudioHook client reported error %s", code if isinstance(code, int) else "?")

    async def _on_close(self, params: dict[str, Any]) -> None:
        reason = params.get("reason")
        self.end_reason = f"close:{reason}" if reason in ("end", "error", "disconnect") else "close"
        self.state = "closing"
        await self.send("closed", {})
        await self.close(CloseCode.NORMAL, "session closed")

    async def on_bytes(self, data: bytes, now: float) -> None:
        if self.state == "paused":  # the client should not; C would drop it anyway
            self.stats.bad["audio_while_paused"] += 1
            return
        if self.state != "active":
            raise SessionError(CloseCode.PROTOCOL, "audio_before_open", "audio before opened")
        frame = self.sample_bytes * len(self.legs)
        if not data or len(data) % frame:
            raise SessionError(CloseCode.BAD_DATA, "bad_frame_size", "audio not whole samples")
        if len(data) > self.max_frame:
            raise SessionError(CloseCode.TOO_BIG, "frame_too_large", "audio frame too large")
        n = len(data) // frame
        self.guard.media(n / RATE, now)
        self.stats.audio_bytes += len(data)
        arrival = time.monotonic_ns()
        if len(self.legs) == 1:
            self.legs[0].write(data, arrival, self.position)
        else:
            samples = np.frombuffer(data, np.uint8).reshape(n, len(self.legs), self.sample_bytes)
            for c, leg in enumerate(self.legs):
                leg.write(samples[:, c, :].tobytes(), arrival, self.position)
        self.position += n


def _tenant_hints(params: dict[str, Any]) -> tuple[Hint, ...]:
    """``tenant`` of the per-call ``inputVariables``, then of the integration's
    ``customConfig`` (each an object; anything else there is not ours to judge)."""
    hints: list[Hint] = []
    for key in ("inputVariables", "customConfig"):
        table = params.get(key)
        if isinstance(table, dict):
            hints.extend(hints_of("audiohook_open", table.get("tenant")))
    return tuple(hints)


def _client_secret(settings: Settings) -> bytes | None:
    secret = settings.audiohook_client_secret
    if secret is None or not secret.get_secret_value():
        return None
    try:
        return base64.b64decode(secret.get_secret_value(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("audiohook_client_secret must be base64 (as Genesys shows it)") from None


def audiohook_router(
    controller: CallController,
    settings: Settings,
    registry: dict[str, AdapterStats] | None = None,
) -> APIRouter:
    """The AudioHook Monitor endpoint; its counters go into ``registry["audiohook"]``."""
    key = settings.audiohook_api_key
    api_key = key.get_secret_value().encode() if key and key.get_secret_value() else None
    secret = _client_secret(settings)
    nonces = NonceCache()
    stats = AdapterStats("audiohook")
    if registry is not None:
        registry[stats.name] = stats
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(tags=["media-websockets"])

    @router.websocket(PATH)
    async def audiohook(websocket: WebSocket) -> None:
        stats.connections += 1
        headers = websocket.headers
        if api_key is None:
            await refuse(websocket, stats, 403, "disabled", "AudioHook adapter off: no API key")
            return
        given = headers.get("x-api-key", "").strip().encode()
        if not hmac.compare_digest(given, api_key):
            await refuse(websocket, stats, 403, "bad_api_key", "invalid X-API-KEY")
            return
        if any(not 0 < len(headers.get(h, "")) <= 128 for h in HEADERS):
            await refuse(websocket, stats, 400, "missing_headers", "Audiohook-* headers required")
            return
        if secret is not None:
            raw = websocket.scope.get("raw_path") or websocket.url.path.encode()
            query = websocket.scope.get("query_string", b"")
            target = raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
            try:
                signed = verify(headers, target, secret)
            except SignatureError as exc:
                log.info("AudioHook upgrade refused: %s", exc)
                stat = "unsigned" if str(exc) == "unsigned" else "bad_signature"
                await refuse(websocket, stats, 403, stat, "signature verification failed")
                return
            if not nonces.fresh(signed.nonce, signed.expires_at, time.time()):
                await refuse(websocket, stats, 403, "replayed", "signature nonce replayed")
                return
        if controller.draining:
            await refuse(websocket, stats, 503, "draining", "draining", retry_after)
            return
        await websocket.accept()
        await AudioHookSession(websocket, controller, settings, stats).run()

    return router
