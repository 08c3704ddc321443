"""The control API (RTP attach without SIP) against a real bridge: httpx drives the
FastAPI app on the bridge's own event loop, real µ-law RTP of real speech goes over UDP
into the returned ports, and the jitter buffer's frames are compared bit for bit with
the source at their RTP timestamps. Also: the token (401/403), malformed JSON (422, the
live call's audio untouched), PATCH, DELETE, the RTP timeout and draining (503 +
Retry-After)."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from bridge_runner import load_speech
from fastapi import FastAPI
from sip_fakes import FakeMedia

from native.codec import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from sip_bridge.bridge import Bridge
from sip_bridge.calls import CallController, MemoryPublisher
from sip_bridge.control_api import control_router
from sip_bridge.settings import Settings
from sip_bridge.sinks import CapturedLeg, CaptureSink

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
Scenario = Callable[[Bridge, CaptureSink, MemoryPublisher, httpx.AsyncClient], Awaitable[None]]


def _run(scenario: Scenario, **settings: Any) -> MemoryPublisher:
    base = random.Random().randrange(30000, 38000, 100)
    values: dict[str, Any] = {
        "sip_listen": "127.0.0.1:0",
        "rtp_ports": f"{base}-{base + 99}",
        "drain_timeout_s": 0.5,
        "control_api_token": TOKEN,
        "api_listen": "",  # the scenario drives the router in-process (httpx ASGI)
        **settings,
    }
    sink, publisher = CaptureSink(), MemoryPublisher()

    async def main() -> None:
        bridge = Bridge(Settings.model_validate(values), sink=sink, publisher=publisher)
        serving = asyncio.create_task(bridge.serve())
        await asyncio.wait_for(bridge.ready.wait(), 10)
        app = FastAPI()
        app.include_router(control_router(bridge.controller, bridge.settings))
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://bridge") as client:
                await scenario(bridge, sink, publisher, client)
        finally:
            bridge.request_stop()
            await asyncio.wait_for(serving, 15)

    asyncio.run(main())
    return publisher


async def _send_rtp(port: int, payload: bytes, *, pt: int, ssrc: int, seq0: int, ts0: int) -> None:
    """One 160-byte G.711 packet every 20 ms, paced on the event loop."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        t0 = time.monotonic()
        for k in range(len(payload) // 160):
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            header = bytes([0x80, pt]) + ((seq0 + k) & 0xFFFF).to_bytes(2, "big")
            header += ((ts0 + 160 * k) & 0xFFFFFFFF).to_bytes(4, "big") + ssrc.to_bytes(4, "big")
            sock.sendto(header + payload[k * 160 : (k + 1) * 160], ("127.0.0.1", port))


def _bit_exact(cap: CapturedLeg, decoded: npt.NDArray[np.int16], ts0: int) -> tuple[int, int]:
    good = bad = 0
    for ts, pcm in cap.by_rtp_ts.items():
        off = (ts - ts0) & 0xFFFFFFFF
        ref = decoded[off : off + pcm.size]
        if ref.size == pcm.size and np.array_equal(ref, pcm):
            good += 1
        else:
            bad += 1
    return good, bad


async def _wait_for(cond: Callable[[], bool], limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while not cond() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return cond()


CREATE = {
    "ani": "+15550123",
    "dnis": "8005550100",
    "correlation_id": "ucid-42",
    "external_ids": {"asterisk_channel": "1712345678.42"},
    "legs": [
        {"label": "caller", "role": "external", "codec": "PCMU"},
        {"label": "agent", "role": "internal", "codec": "PCMA", "payload_type": 8},
    ],
}


def test_attach_two_legs_audio_bit_exact(shared_dir: Path) -> None:
    caller = load_speech(shared_dir, 2.0)
    agent = load_speech(shared_dir, 2.0, skip=40)

    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        r = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        assert r.status_code == 201, r.text
        view = r.json()
        legs = {leg["label"]: leg for leg in view["legs"]}
        assert {k: (v["role"], v["role_source"], v["codec"]) for k, v in legs.items()} == {
            "caller": ("external", "api", "PCMU"),
            "agent": ("internal", "api", "PCMA"),
        }
        assert legs["caller"]["rtp"]["host"] == "127.0.0.1"
        port = legs["caller"]["rtp"]["port"]
        assert legs["caller"]["rtp"]["external_host"] == f"127.0.0.1:{port}"
        call = bridge.controller.calls[view["call_id"]]
        assert (call.kind, call.ani, call.dnis, call.correlation_id) == (
            "api",
            "+15550123",
            "8005550100",
            "ucid-42",
        )
        # both legs stream while malformed and invalid requests arrive
        ulaw, alaw = ulaw_encode(caller), alaw_encode(agent)
        agent_port = legs["agent"]["rtp"]["port"]
        media = asyncio.gather(
            _send_rtp(port, ulaw, pt=0, ssrc=0xC0FFEE, seq0=100, ts0=8000),
            _send_rtp(agent_port, alaw, pt=8, ssrc=0xA6E17, seq0=65500, ts0=2**32 - 800),
        )
        await asyncio.sleep(0.3)
        bad = await client.post(
            "/v1/calls",
            content=b'{"legs": [{"role": "external"',
            headers={**AUTH, "Content-Type": "application/json"},
        )
        assert bad.status_code == 422 and bad.json()["detail"][0]["type"] == "json_invalid"
        bodies: list[dict[str, Any]] = [
            {"legs": []},
            {"legs": [{"codec": "G729"}]},
            {"legs": [{"source": "not-an-ip"}]},
            {"legs": [{"label": "x"}, {"label": "x"}]},
            {"legs": [{"payload_type": 101, "telephone_event_payload_type": 101}]},
            {"legs": [{}], "surprise": 1},
        ]
        for body in bodies:
            r = await client.post("/v1/calls", json=body, headers=AUTH)
            assert r.status_code == 422, (body, r.text)
        r = await client.patch(f"/v1/calls/{view['call_id']}", content=b"[1,", headers=AUTH)
        assert r.status_code == 422
        assert list(bridge.controller.calls) == [view["call_id"]]
        await media
        await asyncio.sleep(0.5)  # the jitter buffer's delay
        cap = sink.captured(legs["caller"]["leg_id"])
        good, wrong = _bit_exact(cap, ulaw_decode(ulaw), 8000)
        assert wrong == 0 and good >= 95  # 100 packets; probation drops the first
        cap = sink.captured(legs["agent"]["leg_id"])
        good, wrong = _bit_exact(cap, alaw_decode(alaw), 2**32 - 800)
        assert wrong == 0 and good >= 95
        r = await client.delete(f"/v1/calls/{view['call_id']}", headers=AUTH)
        assert r.status_code == 204
        assert (await client.get(f"/v1/calls/{view['call_id']}", headers=AUTH)).status_code == 404
        events = [(e.event, e.reason) for e in publisher.of(view["call_id"])]
        assert events == [("started", ""), ("ended", "api")]
        started = publisher.of(view["call_id"])[0]
        assert {k.rsplit(".", 1)[1]: v.value for k, v in started.legs.items()} == {
            "0": "external",
            "1": "internal",
        }
        assert started.external_ids == {"asterisk_channel": "1712345678.42"}

    _run(scenario)


def test_token_required_and_checked_before_the_body() -> None:
    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        for headers in (
            {},
            {"Authorization": "Basic dXNlcjpwYXNz"},
            {"Authorization": "Bearer "},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
        ):
            r = await client.post("/v1/calls", json=CREATE, headers=headers)
            assert r.status_code == 401, headers
            assert r.headers["www-authenticate"].startswith("Bearer")
            r = await client.post("/v1/calls", content=b"{oops", headers=headers)
            assert r.status_code == 401  # authenticated before the body is parsed
            assert (await client.get("/v1/calls", headers=headers)).status_code == 401
            assert (await client.delete("/v1/calls/call_x", headers=headers)).status_code == 401
        assert bridge.controller.calls == {} and publisher.events == []
        assert (await client.get("/v1/calls", headers=AUTH)).json() == []
        assert (
            await client.get("/v1/calls", headers={"authorization": f"bearer {TOKEN}"})
        ).status_code == 200

    _run(scenario)


def test_no_token_configured_means_403() -> None:
    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        r = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        assert r.status_code == 403 and bridge.controller.calls == {}

    _run(scenario, control_api_token=None)


def test_openapi_documents_the_api() -> None:
    app = FastAPI()
    settings = Settings.model_validate({"control_api_token": TOKEN})
    app.include_router(control_router(CallController(FakeMedia(), MemoryPublisher()), settings))
    doc = app.openapi()
    assert set(doc["paths"]) == {
        "/v1/calls",
        "/v1/calls/{call_id}",
        "/v1/calls/{call_id}/pause",
        "/v1/calls/{call_id}/call-state",
        "/v1/calls/by-external-id/{system}/{value}/call-state",
        "/v1/calls/{call_id}/leg-roles",
        "/v1/calls/by-external-id/{system}/{value}/leg-roles",
    }
    assert set(doc["paths"]["/v1/calls/{call_id}"]) == {"get", "patch", "delete"}
    assert set(doc["paths"]["/v1/calls/{call_id}/pause"]) == {"put"}
    post = doc["paths"]["/v1/calls"]["post"]
    assert post["security"] == [{"control_api_token": []}]
    assert {"201", "401", "403", "422", "503"} <= set(post["responses"])
    schemes = doc["components"]["securitySchemes"]
    assert schemes["control_api_token"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "the bridge's control_api_token (CALLSHIELD_CONTROL_API_TOKEN)",
    }
    assert "CallCreate" in doc["components"]["schemas"]


def test_patch_metadata_roles_and_pause() -> None:
    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        view = (await client.post("/v1/calls", json=CREATE, headers=AUTH)).json()
        url = f"/v1/calls/{view['call_id']}"
        r = await client.patch(
            url,
            json={
                "dnis": "8005550199",
                "external_ids": {"asterisk_channel": None, "linkedid": "1712345678.40"},
                "legs": {"agent": {"role": "mixed"}},
            },
            headers=AUTH,
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["ani"], body["dnis"], body["external_ids"]) == (
            "+15550123",
            "8005550199",
            {"linkedid": "1712345678.40"},
        )
        assert [(leg["role"], leg["role_source"]) for leg in body["legs"]] == [
            ("external", "api"),
            ("mixed", "api"),
        ]
        caller_leg = body["legs"][0]["leg_id"]
        r = await client.patch(url, json={"legs": {caller_leg: {"paused": True}}}, headers=AUTH)
        assert r.json()["legs"][0]["paused"] is True
        r = await client.patch(url, json={"legs": {"agent": {"paused": True}}}, headers=AUTH)
        r = await client.patch(url, json={"legs": {"agent": {"paused": False}}}, headers=AUTH)
        r = await client.patch(url, json={"legs": {"nobody": {"paused": True}}}, headers=AUTH)
        assert r.status_code == 404
        assert (await client.patch("/v1/calls/call_nope", json={}, headers=AUTH)).status_code == 404
        r = await client.patch(url, json={"legs": {"agent": {"role": "boss"}}}, headers=AUTH)
        assert r.status_code == 422
        events = publisher.of(view["call_id"])
        assert [e.event for e in events] == ["started", "updated", "updated", "held", "resumed"]
        assert events[1].external_ids == {"linkedid": "1712345678.40"}
        assert [leg.paused for leg in bridge.controller.calls[view["call_id"]].legs.values()] == [
            True,
            False,
        ]
        await asyncio.sleep(0.1)
        assert "paused" in sink.counts(caller_leg)  # the pause reached the jitter buffer

    _run(scenario)


def test_silent_call_ends_after_the_rtp_timeout_and_draining_refuses_new_calls() -> None:
    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        view = (await client.post("/v1/calls", json={"legs": [{}]}, headers=AUTH)).json()
        assert view["rtp_timeout_s"] == 0.5 and view["legs"][0]["payload_type"] == 0
        port = view["legs"][0]["rtp"]["port"]
        await _send_rtp(port, bytes(160 * 10), pt=0, ssrc=7, seq0=0, ts0=0)
        assert await _wait_for(lambda: bridge.controller.calls == {}, 5.0)
        assert [(e.event, e.reason) for e in publisher.of(view["call_id"])] == [
            ("started", ""),
            ("ended", "rtp_timeout"),
        ]
        assert (await client.get(f"/v1/calls/{view['call_id']}", headers=AUTH)).status_code == 404
        live = (await client.post("/v1/calls", json=CREATE, headers=AUTH)).json()
        bridge.controller.draining = True
        r = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        assert r.status_code == 503 and r.headers["retry-after"] == "7"
        # live calls can still be changed and ended while draining
        url = f"/v1/calls/{live['call_id']}"
        assert (await client.patch(url, json={"ani": "x"}, headers=AUTH)).status_code == 200
        assert (await client.delete(url, headers=AUTH)).status_code == 204
        assert (await client.get("/v1/calls", headers=AUTH)).json() == []

    _run(scenario, rtp_timeout_s=0.5, retry_after_s=7)


def test_no_free_port_is_503() -> None:
    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        first = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        assert first.status_code == 201
        r = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        assert r.status_code == 503 and "retry-after" in r.headers
        assert len(bridge.controller.calls) == 1  # nothing half-open left behind
        assert bridge.media.free_ports == 0

    base = random.Random().randrange(40000, 44000, 10)
    _run(scenario, rtp_ports=f"{base}-{base + 3}")


def test_draining_ends_api_calls_at_the_deadline() -> None:
    created: list[str] = []

    async def scenario(
        bridge: Bridge, sink: CaptureSink, publisher: MemoryPublisher, client: httpx.AsyncClient
    ) -> None:
        r = await client.post("/v1/calls", json=CREATE, headers=AUTH)
        created.append(r.json()["call_id"])

    publisher = _run(scenario)
    assert [(e.event, e.reason) for e in publisher.of(created[0])] == [
        ("started", ""),
        ("ended", "drained"),
    ]
