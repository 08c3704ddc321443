"""Twilio Media Streams, listen-only (``<Start><Stream>`` or ``<Connect><Stream>`` with
``url="wss://<bridge>/v1/twilio/media"``).

Twilio opens a WebSocket per stream and sends JSON text messages: ``connected``, then
``start`` (``streamSid``, ``callSid``, ``accountSid``, ``tracks``, ``customParameters``,
``mediaFormat`` audio/x-mulaw 8000 Hz mono), ``media`` (``track`` inbound/outbound,
``chunk``, ``timestamp`` in ms since the stream started, ``payload`` base64 µ-law),
``dtmf`` (``digit``, bidirectional streams only), ``mark`` and ``stop``.

Each track is a pushed leg. ``inbound`` is what Twilio receives from the call's far
end: on the usual call to or from a customer that is the outside party (external), and
``outbound`` what Twilio plays to it (the agent or IVR: internal); ``role_source`` is
``vendor_track``. When the streamed call leg faces the agent instead, the stream says
``direction=outbound`` (a ``<Parameter>``, or the URL's query) and the roles swap.
ANI/DNIS come from the ``From``/``To`` custom parameters when the TwiML passes them,
and the call's tenant from ``tenant`` (``<Parameter name="tenant" value="acme"/>``):
an explicit value of origin ``twilio_parameter``, validated by
:mod:`sip_bridge.tenant` (a refused one is counted and the call falls back to the DNIS
mapping or the default; the stream is never closed for it).

Audio goes through the packetizer at the sample offset of its ``timestamp``, so
duplicated, reordered or missing chunks reach the jitter buffer as such. A digit goes
to the leg's DTMF tracker as an RFC 4733 event and is never stored or logged.

The upgrade request must carry a valid ``X-Twilio-Signature`` (the account's auth token,
settings ``twilio_auth_token``): missing or wrong -> HTTP 403 before the upgrade; no
token configured -> the adapter is off (403). While the bridge drains: 503.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time

from fastapi import APIRouter, WebSocket

from detectors.alert_schema import LegRole
from native.ingest import PayloadType
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.adapters.twilio_signature import signed_url, valid_signature
from sip_bridge.adapters.ws_common import (
    AdapterStats,
    CloseCode,
    SessionError,
    bounded_text,
    refuse,
)
from sip_bridge.adapters.ws_session import MediaSocketSession
from sip_bridge.call_state import hint_of
from sip_bridge.calls import CallController, CallSetup, PushedLegSpec
from sip_bridge.settings import Settings
from sip_bridge.tenant import hints_of

log = logging.getLogger(__name__)
PATH = "/v1/twilio/media"
RATE = 8000
PAYLOAD_TYPES = (PayloadType(0, "PCMU"), PayloadType(101, "telephone-event"))
DTMF_SAMPLES = 800  # Twilio reports a digit, not how long it was held: 100 ms
MAX_TEXT = 64 * 1024
MAX_TIMESTAMP_MS = 1 << 40
TRACKS = ("inbound", "outbound")


def _track(value: object) -> str:
    """``inbound``/``inbound_track`` -> ``inbound`` (Twilio uses both spellings)."""
    if not isinstance(value, str):
        return ""
    return value.removesuffix("_track")


def _obj(msg: dict[str, object], key: str) -> dict[str, object]:
    value = msg.get(key)
    if not isinstance(value, dict):
        raise SessionError(CloseCode.BAD_DATA, f"bad_{key}", f"{key}: object expected")
    return value


def _int(value: object, what: str, limit: int) -> int:
    """Twilio sends its counters as decimal strings."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 15:
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise SessionError(CloseCode.BAD_DATA, f"bad_{what}", f"bad {what}")
    if not 0 <= number < limit:
        raise SessionError(CloseCode.BAD_DATA, f"bad_{what}", f"{what} out of range")
    return number


class TwilioSession(MediaSocketSession):
    def __init__(
        self,
        websocket: WebSocket,
        controller: CallController,
        settings: Settings,
        stats: AdapterStats,
    ) -> None:
        super().__init__(websocket, controller, settings, stats)
        self.direction = websocket.query_params.get("direction", "")
        self.legs: dict[str, Packetizer] = {}
        self.max_chunk = RATE * settings.ws_max_chunk_ms // 1000

    async def on_text(self, text: str, now: float) -> None:
        if len(text) > MAX_TEXT:
            raise SessionError(CloseCode.TOO_BIG, "oversized_message", "message too large")
        try:
            msg = json.loads(text)
        except ValueError:
            raise SessionError(CloseCode.BAD_DATA, "bad_json", "invalid JSON") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("event"), str):
            raise SessionError(CloseCode.BAD_DATA, "bad_message", "not a Twilio message")
        event = msg["event"]
        self.stats.events[event if event in _EVENTS else "unknown"] += 1
        if event == "media":
            self._media(msg, now)
        elif event == "start":
            self._start(msg)
        elif event == "dtmf":
            self._dtmf(msg)
        elif event == "stop":
            self.end_reason = "stop"
            await self.close(CloseCode.NORMAL, "stream stopped")
        elif event not in _EVENTS:  # a newer Twilio: counted, not fatal to the call
            self.stats.bad["unknown_event"] += 1

    def _start(self, msg: dict[str, object]) -> None:
        start = _obj(msg, "start")
        stream_sid = bounded_text(start.get("streamSid") or msg.get("streamSid"), "streamSid")
        call_sid = bounded_text(start.get("callSid"), "callSid")
        if not stream_sid or not call_sid:
            raise SessionError(CloseCode.BAD_DATA, "bad_start", "start without its sids")
        tracks = start.get("tracks", ["inbound"])
        if not isinstance(tracks, list) or not tracks or len(tracks) > len(TRACKS):
            raise SessionError(CloseCode.BAD_DATA, "bad_start", "bad tracks")
        names = [_track(t) for t in tracks]
        if any(n not in TRACKS for n in names) or len(set(names)) != len(names):
            raise SessionError(CloseCode.BAD_DATA, "bad_start", "bad tracks")
        fmt = start.get("mediaFormat", {})
        if not isinstance(fmt, dict) or (
            str(fmt.get("encoding", "")).lower(),
            fmt.get("sampleRate"),
            fmt.get("channels", 1),
        ) != ("audio/x-mulaw", RATE, 1):
            raise SessionError(CloseCode.UNSUPPORTED, "unsupported_format", "need 8 kHz µ-law")
        params = start.get("customParameters") or {}
        if not isinstance(params, dict) or len(params) > 64:
            raise SessionError(CloseCode.BAD_DATA, "bad_start", "bad customParameters")
        direction = bounded_text(params.get("direction") or self.direction, "direction")
        flip = direction.lower() == "outbound"
        roles = {
            "inbound": LegRole.INTERNAL if flip else LegRole.EXTERNAL,
            "outbound": LegRole.EXTERNAL if flip else LegRole.INTERNAL,
        }
        setup = CallSetup(
            kind="twilio",
            ani=bounded_text(params.get("From") or params.get("from"), "From"),
            dnis=bounded_text(params.get("To") or params.get("to"), "To"),
            correlation_id=call_sid,
            external_ids={"twilio": call_sid, "twilio_stream": stream_sid},
            tenant_hints=hints_of("twilio_parameter", params.get("tenant")),
            call_state=hint_of("twilio_parameter", params.get("call_state")),
        )
        specs = [
            PushedLegSpec(name, roles[name], "vendor_track", "PCMU", PAYLOAD_TYPES)
            for name in names
        ]
        handles = self.start_call(setup, specs)
        self.legs = {name: Packetizer(handles[name], 0) for name in names}

    def _media(self, msg: dict[str, object], now: float) -> None:
        if self.call is None:
            raise SessionError(CloseCode.PROTOCOL, "media_before_start", "media before start")
        media = _obj(msg, "media")
        timestamp = _int(media.get("timestamp"), "timestamp", MAX_TIMESTAMP_MS)
        payload = media.get("payload")
        if not isinstance(payload, str) or len(payload) > 4 * (self.max_chunk // 3 + 1):
            raise SessionError(CloseCode.TOO_BIG, "chunk_too_large", "media payload too large")
        try:
            chunk = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise SessionError(CloseCode.BAD_DATA, "bad_base64", "payload is not base64") from None
        if not chunk or len(chunk) > self.max_chunk:
            raise SessionError(CloseCode.BAD_DATA, "bad_chunk_size", "bad media chunk size")
        leg = self.legs.get(_track(media.get("track")))
        if leg is None:  # a track the start message did not announce: dropped
            self.stats.bad["unknown_track"] += 1
            return
        self.guard.media(len(chunk) / RATE / len(self.legs), now)
        self.stats.audio_bytes += len(chunk)
        leg.write(chunk, time.monotonic_ns(), timestamp * RATE // 1000)

    def _dtmf(self, msg: dict[str, object]) -> None:
        if self.call is None:
            raise SessionError(CloseCode.PROTOCOL, "dtmf_before_start", "dtmf before start")
        dtmf = _obj(msg, "dtmf")
        leg = self.legs.get(_track(dtmf.get("track") or "inbound")) or self.legs.get("inbound")
        digit = dtmf.get("digit")
        if leg is None or not isinstance(digit, str) or len(digit) != 1:
            raise SessionError(CloseCode.BAD_DATA, "bad_dtmf", "bad dtmf message")
        if not leg.dtmf(digit, leg.next_offset, DTMF_SAMPLES, time.monotonic_ns()):
            if leg.leg.closed:
                return
            raise SessionError(CloseCode.BAD_DATA, "bad_dtmf", "not a DTMF digit")
        self.stats.dtmf_events += 1


_EVENTS = frozenset({"connected", "start", "media", "dtmf", "mark", "stop"})


def twilio_router(
    controller: CallController,
    settings: Settings,
    registry: dict[str, AdapterStats] | None = None,
) -> APIRouter:
    """The Media Streams endpoint; its counters go into ``registry["twilio"]``."""
    secret = settings.twilio_auth_token
    token = secret.get_secret_value().encode() if secret and secret.get_secret_value() else None
    stats = AdapterStats("twilio")
    if registry is not None:
        registry[stats.name] = stats
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(tags=["media-websockets"])

    @router.websocket(PATH)
    async def media_stream(websocket: WebSocket) -> None:
        stats.connections += 1
        if token is None:
            await refuse(websocket, stats, 403, "disabled", "Twilio adapter off: no auth token")
            return
        given = websocket.headers.get("x-twilio-signature", "")
        if not given:
            await refuse(websocket, stats, 403, "unsigned", "X-Twilio-Signature required")
            return
        url = signed_url(
            websocket.url.path,
            websocket.url.query,
            websocket.headers,
            websocket.url.scheme,
            settings.twilio_public_url,
        )
        if not valid_signature(token, [url], given):
            await refuse(websocket, stats, 403, "bad_signature", "invalid X-Twilio-Signature")
            return
        if controller.draining:
            await refuse(websocket, stats, 503, "draining", "draining", retry_after)
            return
        await websocket.accept()
        await TwilioSession(websocket, controller, settings, stats).run()

    return router
