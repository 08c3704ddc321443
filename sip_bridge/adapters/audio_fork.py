"""FreeSWITCH ``mod_audio_fork`` and jambonz ``listen``, listen-only, on
``wss://<bridge>/v1/audio-fork`` (subprotocols ``audio.jambonz.org``,
``audio.drachtio.org``, ``audiostream.drachtio.org``).

Both send one JSON text message first, then binary messages of raw 16-bit
little-endian PCM, with no header, sequence number or timestamp:

- jambonz ``listen`` (nested in ``dial`` or alone): the call's attributes (``callSid``,
  ``from``, ``to``, ``direction``, ...), ``sampleRate`` (8000-64000), ``mixType``
  (``mono`` | ``stereo`` | ``mixed``) and the verb's ``metadata`` object. With
  ``passDtmf`` digits arrive later as text: ``{"event": "dtmf", "dtmf": "5", ...}``.
- ``uuid_audio_fork <uuid> start <url> <mono|mixed|stereo> <8k|16k> <metadata>``: the
  metadata string it is given. It says neither rate nor mix, so the URL does:
  ``/v1/audio-fork?rate=16000&mix=stereo`` (the message's own fields win).

Legs: ``stereo`` is interleaved caller (channel 0: the far end of the forked channel,
the outside party: external) and callee (channel 1: internal), ``role_source``
``vendor_track``. ``mixed`` is one leg of both parties (role mixed, voice detectors
abstain). ``mono`` is one party, the forked channel's far end, but which party that is
depends on where the fork was started, so its role is unknown (detectors abstain)
unless the stream says it: ``role`` (external | internal) in the metadata or the URL.
The call's tenant, likewise: ``tenant`` in the metadata (jambonz ``listen``'s
``metadata``; for ``uuid_audio_fork`` the metadata string, a JSON object, is the
message), else the URL's ``?tenant=``: an explicit value of origin
``audio_fork_metadata`` (:mod:`sip_bridge.tenant`; a refused one is counted and the call
takes the DNIS mapping or the default, the stream goes on).

Audio goes through the packetizer at the running sample count (the WebSocket is
ordered), so the jitter buffer paces it. Robustness: a first message that is not a
JSON object, audio before it, a rate the native core does not decode, a size that is
not whole samples (odd bytes; stereo not a multiple of 4), a chunk over
``ws_max_chunk_ms``, a client faster than real time or flooding messages close that
connection only, with a clear code, counted by reason. Later text messages that are
not JSON, and events we do not know (``mark``, ...), are counted and ignored.

Authentication before the upgrade: ``Authorization: Bearer <audio_fork_token>`` or
basic auth ``audio_fork_basic_auth`` ("user:password"; jambonz ``listen`` has
``wsAuth.username``/``password``, mod_audio_fork ``MOD_AUDIO_BASIC_AUTH_USERNAME`` /
``_PASSWORD``). Neither configured: the endpoint is off (403). Draining: 503.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import time
from typing import Any

from fastapi import APIRouter, WebSocket

from detectors.alert_schema import LegRole
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.adapters.pcm import L16_PTS, l16_payload_types, native_l16_rates, split_stereo
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

SYSTEMS = {"audio_fork": "freeswitch", "jambonz": "jambonz"}  # vendor -> id system
PATH = "/v1/audio-fork"
SUBPROTOCOLS = ("audio.jambonz.org", "audio.drachtio.org", "audiostream.drachtio.org")
MIX_TYPES = ("mono", "mixed", "stereo")
MAX_TEXT = 64 * 1024
DTMF_MS = 100  # jambonz's duration field has no documented unit: digits last 100 ms
_EVENTS = frozenset({"dtmf", "mark"})
_ROLES = {"external": LegRole.EXTERNAL, "internal": LegRole.INTERNAL}


def _field(data: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in data:
            return data[name]
    return None


def _first(*values: object) -> object:
    """The first value present (not None, not empty)."""
    return next((v for v in values if v is not None and v != ""), None)


class AudioForkSession(MediaSocketSession):
    def __init__(
        self,
        websocket: WebSocket,
        controller: CallController,
        settings: Settings,
        stats: AdapterStats,
        vendor: str,
    ) -> None:
        super().__init__(websocket, controller, settings, stats)
        self.vendor = vendor
        self.query = websocket.query_params
        self.channels = 1
        self.rate = 0
        self.max_bytes = 0
        self.legs: list[Packetizer] = []

    async def on_text(self, text: str, now: float) -> None:
        if len(text) > MAX_TEXT:
            raise SessionError(CloseCode.TOO_BIG, "oversized_message", "message too large")
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if self.call is None:
            if not isinstance(data, dict):
                raise SessionError(CloseCode.BAD_DATA, "bad_metadata", "metadata: JSON object")
            self.stats.events["metadata"] += 1
            self._start(data)
            return
        event = _field(data, "event", "type") if isinstance(data, dict) else None
        if not isinstance(event, str):
            self.stats.bad["bad_json" if data is None else "bad_message"] += 1
            return
        self.stats.events[event if event in _EVENTS else "unknown"] += 1
        if event == "dtmf":
            assert isinstance(data, dict)
            self._dtmf(data)
        elif event not in _EVENTS:
            self.stats.bad["unknown_event"] += 1

    def _start(self, data: dict[str, Any]) -> None:
        meta = data.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        rate = _field(data, "sampleRate", "sample_rate") or self.query.get("rate") or 8000
        mix = _field(data, "mixType", "mix_type") or self.query.get("mix") or "mono"
        try:
            rate = int(rate)
        except (TypeError, ValueError):
            raise SessionError(CloseCode.BAD_DATA, "bad_metadata", "bad sampleRate") from None
        if rate not in L16_PTS or rate not in native_l16_rates():
            raise SessionError(CloseCode.UNSUPPORTED, "unsupported_rate", f"rate {rate} refused")
        if mix not in MIX_TYPES:
            raise SessionError(CloseCode.UNSUPPORTED, "unsupported_mix", "mixType?")
        role_text = _field(meta, "role") or _field(data, "role") or self.query.get("role")
        if role_text is not None and role_text not in _ROLES:
            raise SessionError(CloseCode.BAD_DATA, "bad_metadata", "role: external|internal")
        call_sid = bounded_text(_field(data, "callSid", "call_sid", "uuid"), "callSid")
        # named by the system, so risk-by-external-id finds it (issue 12)
        external_ids = {SYSTEMS[self.vendor]: call_sid} if call_sid else {}
        direction = bounded_text(data.get("direction"), "direction")
        if direction:
            external_ids["direction"] = direction
        setup = CallSetup(
            kind=self.vendor,
            ani=bounded_text(_field(data, "from", "caller_id", "ani"), "from"),
            dnis=bounded_text(_field(data, "to", "dnis"), "to"),
            correlation_id=call_sid or None,
            external_ids=external_ids,
            tenant_hints=hints_of(
                "audio_fork_metadata",
                _first(_field(meta, "tenant"), _field(data, "tenant"), self.query.get("tenant")),
            ),
            call_state=hint_of(
                "audio_fork_metadata",
                _first(
                    _field(meta, "call_state"),
                    _field(data, "call_state"),
                    self.query.get("call_state"),
                ),
            ),
        )
        pts = l16_payload_types((rate,))
        if mix == "stereo":
            legs = [
                PushedLegSpec("caller", LegRole.EXTERNAL, "vendor_track", "L16", pts),
                PushedLegSpec("callee", LegRole.INTERNAL, "vendor_track", "L16", pts),
            ]
        elif mix == "mixed":
            legs = [PushedLegSpec("mixed", LegRole.MIXED, "vendor_track", "L16", pts)]
        elif role_text is not None:
            legs = [PushedLegSpec("mono", _ROLES[role_text], "metadata", "L16", pts)]
        else:
            legs = [PushedLegSpec("mono", LegRole.UNKNOWN, "vendor_track", "L16", pts)]
        handles = self.start_call(setup, legs)
        self.rate, self.channels = rate, len(legs)
        self.max_bytes = rate * 2 * self.channels * self.settings.ws_max_chunk_ms // 1000
        self.legs = [Packetizer(handles[spec.label], L16_PTS[rate], rate, 2) for spec in legs]

    async def on_bytes(self, data: bytes, now: float) -> None:
        if self.call is None:
            raise SessionError(CloseCode.PROTOCOL, "audio_before_metadata", "metadata first")
        if len(data) > self.max_bytes:
            raise SessionError(CloseCode.TOO_BIG, "chunk_too_large", "audio chunk too large")
        if len(data) % (2 * self.channels):
            stat = "stereo_misaligned" if self.channels == 2 else "odd_size"
            raise SessionError(CloseCode.BAD_DATA, stat, f"{len(data)} bytes: not whole frames")
        if not data:
            return
        samples = len(data) // (2 * self.channels)
        self.guard.media(samples / self.rate, now)
        self.stats.audio_bytes += len(data)
        arrival = time.monotonic_ns()
        chunks = split_stereo(data) if self.channels == 2 else (data,)
        for leg, chunk in zip(self.legs, chunks, strict=True):
            leg.write(chunk, arrival)

    def _dtmf(self, data: dict[str, Any]) -> None:
        digit = _field(data, "dtmf", "digit")
        leg = self.legs[0]  # the caller's (the only leg unless stereo)
        duration = self.rate * DTMF_MS // 1000
        start = max(0, leg.next_offset - duration)
        if not isinstance(digit, str) or len(digit) != 1:
            self.stats.bad["bad_dtmf"] += 1
        elif leg.dtmf(digit, start, duration, time.monotonic_ns()):
            self.stats.dtmf_events += 1
        elif not leg.leg.closed:
            self.stats.bad["bad_dtmf"] += 1


def _credentials(settings: Settings) -> tuple[bytes | None, bytes | None]:
    token, basic = settings.audio_fork_token, settings.audio_fork_basic_auth
    return (
        token.get_secret_value().encode() if token and token.get_secret_value() else None,
        basic.get_secret_value().encode() if basic and basic.get_secret_value() else None,
    )


def _authorized(header: str, token: bytes | None, basic: bytes | None) -> bool:
    scheme, _, given = header.partition(" ")
    given = given.strip()
    if scheme.lower() == "bearer" and token is not None and given:
        return hmac.compare_digest(given.encode(), token)
    if scheme.lower() == "basic" and basic is not None and given:
        try:
            decoded = base64.b64decode(given, validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(decoded, basic)
    return False


def audio_fork_router(
    controller: CallController,
    settings: Settings,
    registry: dict[str, AdapterStats] | None = None,
) -> APIRouter:
    """The audio-fork endpoint; its counters go into ``registry["audio_fork"]``."""
    token, basic = _credentials(settings)
    stats = AdapterStats("audio_fork")
    if registry is not None:
        registry[stats.name] = stats
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(tags=["media-websockets"])

    @router.websocket(PATH)
    async def audio_fork(websocket: WebSocket) -> None:
        stats.connections += 1
        if token is None and basic is None:
            await refuse(websocket, stats, 403, "disabled", "audio fork off: no credential")
            return
        if not _authorized(websocket.headers.get("authorization", ""), token, basic):
            await refuse(websocket, stats, 403, "unauthorized", "bad or missing credential")
            return
        if controller.draining:
            await refuse(websocket, stats, 503, "draining", "draining", retry_after)
            return
        offered = websocket.scope.get("subprotocols", [])
        chosen = next((p for p in offered if p in SUBPROTOCOLS), None)
        await websocket.accept(subprotocol=chosen)
        vendor = "jambonz" if chosen == "audio.jambonz.org" else "audio_fork"
        await AudioForkSession(websocket, controller, settings, stats, vendor).run()

    return router
