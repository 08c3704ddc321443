"""A queue claimed mid-call re-scopes the call's alert policy, with real parts: a real
bridge in-process (tiny dev fixture models, no speaker model, so no speaker biometrics)
publishing to a real redis-server; a call placed through the control API streams real
speech as µ-law RTP, marked from 1 s on. The stored policy caps synthetic voice at
``elevated`` with threshold 0.5; its rule for the queue ``vip`` lowers the threshold to
0.4 and lifts the cap. After the first alert, an analyst's API key
sends ``PATCH /api/v1/calls/{id}`` ``{"queue": "vip"}`` to the real dashboard app (same
Redis); the claim reaches the bridge's claims consumer, and the alert's next revisions
are raised under the queue's rule."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from argon2 import PasswordHasher
from bridge_runner import load_speech, wait_for
from fastapi.testclient import TestClient
from test_policy_hot_reload import _alerts, _apply

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.alert_schema import Band
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.bench.api_calls import ApiCall, BridgeHost, bridge_settings, marked
from sip_bridge.wiring import Wiring

TOKEN = "queue-claim-token"
POLICY = {
    "dimensions": {"synthetic_voice": {"threshold": 0.5, "max_band": "elevated"}},
    "tenants": {
        "default": {"queues": {"vip": {"dimensions": {"synthetic_voice": {"threshold": 0.4}}}}}
    },
}


@contextmanager
def _dashboard(bus: BusSettings) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The dashboard app on the bridge's Redis, and an analyst API key's headers."""
    settings = DashboardSettings(
        session_key="k" * 48, allowed_origins=["https://testserver"], listen="127.0.0.1:8080"
    )
    hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    app = create_app(settings, bus, password_hasher=hasher)
    with TestClient(app, base_url="https://testserver") as client:
        ctx = app.state.ctx
        _, key = client.portal.call(ctx.api_keys.create, "agent-desktop", Role.ANALYST)
        yield client, {"Authorization": f"Bearer {key}"}


def test_claimed_queue_policy_applies_mid_call(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    policy = _apply(url, keys, POLICY)
    base = 43000 + (time.monotonic_ns() // 1000 % 40) * 200
    wiring = Wiring(
        bridge_settings(base, TOKEN, "tiny"),
        settings,
        ModelSettings(models_dir=tmp_path / "no-models"),
    )
    assert wiring.biometrics is None  # the claims reach fusion without speaker biometrics
    host = BridgeHost(wiring.settings, wiring)
    host.start()
    try:
        call = ApiCall(host.api_url, TOKEN, marked(load_speech(shared_dir, 12.0), 1.0), 1.0)
        call.start()
        assert wait_for(lambda: bool(_alerts(client, keys, call.call_id)), 15)
        with _dashboard(settings) as (dash, auth):
            done = dash.patch(f"/api/v1/calls/{call.call_id}", json={"queue": "vip"}, headers=auth)
            assert done.status_code == 202 and done.json()["fields"] == ["queue"], done.text
        assert wait_for(
            lambda: any(
                a.thresholds["threshold"] == 0.4 for a in _alerts(client, keys, call.call_id)
            ),
            10,
        )
        call.wait()
        assert not call.error
        call.end()
        assert wiring.http is not None
        h, p = wiring.http.address
        with urllib.request.urlopen(f"http://{h}:{p}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
    finally:
        host.stop()

    assert "callshield_call_updates_applied_total 1.0" in metrics
    alerts = sorted(_alerts(client, keys, call.call_id), key=lambda a: a.revision)
    assert len({a.alert_id for a in alerts}) == 1  # one episode: revisions, not new alerts
    assert {a.policy_version for a in alerts} == {policy.version}
    first_q = next(i for i, a in enumerate(alerts) if a.thresholds["threshold"] == 0.4)
    before, after = alerts[:first_q], alerts[first_q:]
    assert before and all(a.thresholds["threshold"] == 0.5 for a in before)
    assert all(a.band is Band.ELEVATED for a in before)  # the default rule's cap
    assert all(a.thresholds["threshold"] == 0.4 for a in after)
    assert after[0].band is Band.HIGH  # the queue's rule lifts the cap
