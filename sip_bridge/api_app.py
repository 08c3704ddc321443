"""The bridge's ASGI app: every HTTP and WebSocket ingress of the media process on one
port (settings ``api_listen``): the control API (RTP attach), and the adapters that
carry media over HTTP (WHIP) or WebSockets (Twilio Media Streams, Genesys AudioHook,
FreeSWITCH mod_audio_fork / jambonz). Each adapter contributes a router; its handlers
run on the bridge's loop, which owns the call controller.
"""

from __future__ import annotations

from fastapi import FastAPI

from sip_bridge.adapters.audio_fork import audio_fork_router
from sip_bridge.adapters.audiohook import audiohook_router
from sip_bridge.adapters.audiosocket import AudioSocketServer
from sip_bridge.adapters.audiosocket_api import audiosocket_router
from sip_bridge.adapters.connect_api import include_connect
from sip_bridge.adapters.twilio_media import twilio_router
from sip_bridge.adapters.whip import include_whip
from sip_bridge.adapters.ws_common import AdapterStats
from sip_bridge.calls import CallController
from sip_bridge.control_api import control_router
from sip_bridge.settings import Settings


def build_api(
    controller: CallController,
    settings: Settings,
    *,
    audiosocket: AudioSocketServer | None = None,
) -> FastAPI:
    app = FastAPI(
        title="CallShield bridge",
        summary="Attach calls to the media process: RTP, WebRTC (WHIP), media WebSockets",
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(control_router(controller, settings))
    if audiosocket is not None:  # its calls are registered here, its media come over TCP
        app.include_router(audiosocket_router(audiosocket.calls, audiosocket.target, settings))
    adapter_stats: dict[str, AdapterStats] = {}  # media-WebSocket counters, for /metrics
    app.state.adapter_stats = adapter_stats
    app.include_router(twilio_router(controller, settings, adapter_stats))
    app.include_router(audio_fork_router(controller, settings, adapter_stats))
    app.include_router(audiohook_router(controller, settings, adapter_stats))
    include_whip(app, controller, settings)  # WHIP: POST /v1/whip, its resources
    include_connect(app, controller, settings, adapter_stats)  # Amazon Connect contacts
    return app
