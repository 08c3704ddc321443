"""The bridge serves its ASGI app (control API, later WHIP and media WebSockets) on a
real TCP port of its own event loop, and closes it when it stops."""

from __future__ import annotations

import socket

import httpx
from bridge_runner import RunningBridge


def test_the_bridge_serves_the_control_api_on_its_own_port() -> None:
    bridge = RunningBridge(control_api_token="tok-123")
    bridge.start()
    try:
        assert bridge.bridge.api is not None
        host, port = bridge.bridge.api.address
        base = f"http://{host}:{port}"
        r = httpx.get(f"{base}/v1/calls", timeout=5)
        assert r.status_code == 401
        r = httpx.get(f"{base}/v1/calls", headers={"Authorization": "Bearer tok-123"}, timeout=5)
        assert r.status_code == 200 and r.json() == []
        r = httpx.post(
            f"{base}/v1/calls",
            headers={"Authorization": "Bearer tok-123"},
            content=b"{not json",
            timeout=5,
        )
        assert r.status_code == 422
    finally:
        bridge.stop()
    with socket.socket() as s:  # the port is closed once the bridge stopped
        assert s.connect_ex((host, port)) != 0


def test_api_off_when_api_listen_is_empty() -> None:
    bridge = RunningBridge(api_listen="")
    bridge.start()
    try:
        assert bridge.bridge.api is None
    finally:
        bridge.stop()
