"""Early media through the control API (issue 10): ``call_state`` at create and in
PATCH, and ``PUT /v1/calls/{id}/call-state`` for any live call (here a plain SIP call
through the real UAS). Refused values get a clear 422 (409 for early after answer),
are counted by origin and reason, and change nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI
from sip_fakes import Harness, harness, invite

from sip_bridge.control_api import control_router
from sip_bridge.settings import Settings

TOKEN = "call-state-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LEGS = [{"label": "caller", "role": "external"}, {"label": "agent", "role": "internal"}]


def _run(scenario: Callable[[Harness, httpx.AsyncClient], Awaitable[None]]) -> Harness:
    h = harness()
    app = FastAPI()
    settings = Settings.model_validate({"control_api_token": TOKEN})
    app.include_router(control_router(h.controller, settings))

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bridge") as client:
            await scenario(h, client)

    asyncio.run(main())
    return h


def test_create_early_then_patch_answered() -> None:
    async def scenario(h: Harness, client: httpx.AsyncClient) -> None:
        r = await client.post("/v1/calls", json={"legs": LEGS, "call_state": "early"}, headers=AUTH)
        assert r.status_code == 201, r.text
        view: dict[str, Any] = r.json()
        assert view["early_media"] is True
        call = h.controller.calls[view["call_id"]]
        assert call.early_media is True
        r = await client.patch(
            f"/v1/calls/{call.call_id}", json={"call_state": "answered"}, headers=AUTH
        )
        assert r.status_code == 200 and r.json()["early_media"] is False
        assert call.early_media is False and len(call.legs) == 2
        r = await client.patch(
            f"/v1/calls/{call.call_id}",
            json={"call_state": "early", "ani": "+15550999"},
            headers=AUTH,
        )
        assert r.status_code == 409 and "already answered" in r.json()["detail"]
        assert call.ani == "" and call.early_media is False  # nothing changed
        plain = await client.post("/v1/calls", json={"legs": LEGS}, headers=AUTH)
        assert plain.json()["early_media"] is False  # said nothing: no early phase

    h = _run(scenario)
    assert h.controller.call_states.snapshot() == {
        ("said", "api", "early"): 1,
        ("said", "api", "answered"): 1,
        ("rejected", "api", "after_answer"): 1,
    }
    assert [e for e, _ in h.events()] == ["started", "updated", "started"]


def test_bad_values_are_422_counted_and_create_nothing() -> None:
    async def scenario(h: Harness, client: httpx.AsyncClient) -> None:
        for value, reason in (("ringing?", "malformed"), ("onhold", "unknown")):
            r = await client.post(
                "/v1/calls", json={"legs": LEGS, "call_state": value}, headers=AUTH
            )
            assert r.status_code == 422, value
            assert r.json()["detail"] == f"call_state refused ({reason}): say early or answered"
        assert h.controller.calls == {}
        r = await client.post("/v1/calls", json={"legs": LEGS, "call_state": "early"}, headers=AUTH)
        call_id = r.json()["call_id"]
        r = await client.patch(f"/v1/calls/{call_id}", json={"call_state": "x y"}, headers=AUTH)
        assert r.status_code == 422 and h.controller.calls[call_id].early_media is True
        r = await client.put(
            f"/v1/calls/{call_id}/call-state", json={"call_state": "huh"}, headers=AUTH
        )
        assert r.status_code == 422 and h.controller.calls[call_id].early_media is True
        r = await client.put(
            "/v1/calls/call_none/call-state", json={"call_state": "answered"}, headers=AUTH
        )
        assert r.status_code == 404
        r = await client.put(f"/v1/calls/{call_id}/call-state", json={"call_state": "answered"})
        assert r.status_code == 401 and h.controller.calls[call_id].early_media is True

    h = _run(scenario)
    assert h.controller.call_states.snapshot() == {
        ("rejected", "api", "malformed"): 2,
        ("rejected", "api", "unknown"): 2,
        ("said", "api", "early"): 1,
    }


def test_put_call_state_answers_a_sip_call() -> None:
    async def scenario(h: Harness, client: httpx.AsyncClient) -> None:
        _, ok = h.send(invite(extra="X-CallShield-Call-State: early\n"))
        assert ok.status == 200
        _, ok2 = h.send(
            invite(
                call_id="second@pc33",
                branch="z9hG4bKsecond",
                extra="X-CallShield-Call-State: early\n",
            )
        )
        assert ok2.status == 200
        first, second = h.controller.calls.values()
        assert first.early_media is True and second.early_media is True
        r = await client.put(
            f"/v1/calls/{first.call_id}/call-state", json={"call_state": "answered"}, headers=AUTH
        )
        assert r.status_code == 200
        assert r.json() == {"call_id": first.call_id, "early_media": False}
        assert first.early_media is False and second.early_media is True
        by_id = "/v1/calls/by-external-id/sip-call-id/second@pc33/call-state"
        r = await client.put(by_id, json={"call_state": "answered"}, headers=AUTH)
        assert r.status_code == 200
        assert r.json() == [{"call_id": second.call_id, "early_media": False}]
        assert second.early_media is False and len(h.media.legs) == 2
        r = await client.put(
            "/v1/calls/by-external-id/sip-call-id/nosuch/call-state",
            json={"call_state": "answered"},
            headers=AUTH,
        )
        assert r.status_code == 404
        call = first
        r = await client.get(f"/v1/calls/{call.call_id}", headers=AUTH)
        assert r.status_code == 404  # PATCH/GET are for the API's own calls; PUT is for any

    h = _run(scenario)
    answered = ("updated", "answered")
    assert h.events() == [("started", ""), ("started", ""), answered, answered]
    assert h.controller.call_states.snapshot() == {
        ("said", "sip_header", "early"): 2,
        ("said", "api", "answered"): 2,
    }
