"""Ingress adapters for transports other than SIP/RTP: WebRTC (WHIP) and the media
WebSockets and TCP protocols that CPaaS and PBX vendors define. Each ends in a pushed
native ingest stream per leg (``sip_bridge.media.PushedLeg``), so every transport
shares the one jitter buffer and the one frame contract (DESIGN §1)."""
