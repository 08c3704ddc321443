"""The alert policy on the dashboard against a real redis-server: analysts read it,
admins change it (audited with before and after, 422 with a reason for bad input and
nothing stored, 409 for an edit of an older version), and the what-if replays the
current and a proposed policy over stored scores and labels written through the real
label route. The admin page does the same with forms."""

from __future__ import annotations

import random
import re

from conftest import Dash
from dash_factory import KEYS, add_alert, make_alert

from detectors.alert_schema import Dimension, ScoreUpdate, WindowQuality
from detectors.bus.codec import encode
from detectors.bus.policy import Policy, PolicyBody
from detectors.bus.policy_store import read_policy

SV = Dimension.SYNTHETIC_VOICE
PROPOSED = {"dimensions": {"synthetic_voice": {"threshold": 0.8}}}


def _audit(dash: Dash) -> list[dict[str, object]]:
    return list(dash.client.portal.call(dash.ctx.audit.recent))


def test_admins_change_the_policy_others_read_it(dash: Dash) -> None:
    viewer, analyst, admin = (dash.key_headers(r) for r in ("viewer", "analyst", "admin"))
    assert dash.client.get("/api/v1/policy", headers=viewer).status_code == 403
    got = dash.client.get("/api/v1/policy", headers=analyst)
    assert got.status_code == 200 and got.json()["version"] == Policy().version
    body = {"policy": PROPOSED, "base_version": Policy().version}
    assert dash.client.put("/api/v1/policy", json=body, headers=analyst).status_code == 403

    done = dash.client.put("/api/v1/policy", json=body, headers=admin)
    assert done.status_code == 200, done.text
    version = done.json()["version"]
    assert version.startswith("1-") and done.json()["dimensions"]["synthetic_voice"][
        "threshold"
    ] == (0.8)
    stored = read_policy(dash.redis, KEYS)
    assert stored is not None and stored.version == version
    assert dash.client.get("/api/v1/policy", headers=analyst).json()["version"] == version
    (entry,) = [e for e in _audit(dash) if e["action"] == "policy.update"]
    detail = entry["detail"]
    assert entry["target"] == version and detail["before_version"] == Policy().version  # type: ignore[index]
    assert "synthetic_voice" not in detail["before"]["dimensions"]  # type: ignore[index]
    assert detail["before"]["default"]["threshold"] == 0.5  # type: ignore[index]
    assert detail["after"]["dimensions"]["synthetic_voice"]["threshold"] == 0.8  # type: ignore[index]

    # an edit of the version before: 409, nothing stored
    stale = dash.client.put("/api/v1/policy", json=body, headers=admin)
    assert stale.status_code == 409 and "reload" in stale.json()["detail"]

    for bad in (
        {"policy": {"default": {"n": 4, "m": 3}}},
        {"policy": {"dimensions": {"telepathy": {}}}},
        {"policy": {"early_media_alerts": True}},
        {"policy": {"default": {"threshold": -0.1}}},
        {"policy": {"tenants": {"Not A Tenant": {}}}},
        {"policy": {}, "surprise": 1},
        {"policy": PROPOSED, "base_version": "x" * 100},
    ):
        refused = dash.client.put("/api/v1/policy", json=bad, headers=admin)
        assert refused.status_code == 422, (bad, refused.text)
    assert (
        dash.client.put("/api/v1/policy", content=b'{"policy": {', headers=admin).status_code == 422
    )
    stored = read_policy(dash.redis, KEYS)
    assert stored is not None and stored.version == version  # bad input changed nothing
    assert [e["action"] for e in _audit(dash)].count("policy.update") == 1


def _seed_scores(dash: Dash) -> None:
    """100 genuine calls (5 with a burst at 0.7) and 10 fraud calls (0.9) whose alerts
    an analyst labels true positives through the route."""
    rng = random.Random(5)
    pipe = dash.redis.pipeline(transaction=False)

    def call(name: str, scores: list[float]) -> None:
        for i, s in enumerate(scores):
            update = ScoreUpdate(
                call_id=name,
                leg_id=f"{name}.0",
                dimension=SV,
                window_start_s=2.0 * i,
                window_end_s=2.0 * i + 4.0,
                score=s,
                quality=WindowQuality(net_speech_s=3.0),
            )
            pipe.xadd(KEYS.scores, encode(update))  # type: ignore[arg-type]

    for k in range(100):
        call(f"g{k}", [rng.uniform(0, 0.3)] * 3 + ([0.7] * 3 if k < 5 else []))
    for k in range(10):
        call(f"f{k}", [0.9] * 4)
    pipe.execute()
    analyst = dash.key_headers("analyst")
    for k in range(10):
        alert = make_alert(call_id=f"f{k}")
        add_alert(dash.redis, alert)
        r = dash.client.post(
            f"/api/v1/alerts/{alert.alert_id}/label",
            json={"label": "true_positive"},
            headers=analyst,
        )
        assert r.status_code == 200, r.text


def test_what_if_replays_current_and_proposed_over_stored_scores(dash: Dash) -> None:
    _seed_scores(dash)
    admin = dash.key_headers("admin")
    r = dash.client.post(
        "/api/v1/policy/what-if", json={"policy": PROPOSED, "days": 7}, headers=admin
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["data"]["genuine_calls"] == 100 and got["data"]["fraud_calls"] == 10
    cur, new = got["current"], got["proposed"]
    assert cur["version"] == Policy().version
    assert new["content_hash"] == PolicyBody.model_validate(PROPOSED).content_hash()
    assert cur["false_alerts_per_1000_genuine"] == 50.0  # the five 0.7 bursts at 0.5
    assert new["false_alerts_per_1000_genuine"] == 0.0
    assert (cur["fraud_calls_hit"], new["fraud_calls_hit"]) == (10, 10)
    assert new["miss_rate"] == 0.0
    lax = {"policy": {"dimensions": {"synthetic_voice": {"threshold": 0.95}}}}
    missed = dash.client.post("/api/v1/policy/what-if", json=lax, headers=admin).json()
    assert missed["proposed"]["miss_rate"] == 1.0
    analyst = dash.key_headers("analyst")
    assert dash.client.post("/api/v1/policy/what-if", json=lax, headers=analyst).status_code == 403
    bad = {"policy": {"default": {"m": 0}}}
    assert dash.client.post("/api/v1/policy/what-if", json=bad, headers=admin).status_code == 422
    assert read_policy(dash.redis, KEYS) is None  # a what-if stores nothing


def test_admin_page_what_if_and_apply(dash: Dash) -> None:
    _seed_scores(dash)
    dash.login("admin")
    page = dash.client.get("/policy")
    assert page.status_code == 200 and Policy().version in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    form = {
        "csrf_token": csrf.group(1),
        "policy": '{"dimensions": {"synthetic_voice": {"threshold": 0.8}}}',
    }
    shown = dash.client.post("/policy/what-if", data={**form, "days": "30"})
    assert shown.status_code == 200 and 'id="what-if"' in shown.text
    assert "50.00" in shown.text and "0.00" in shown.text
    refused = dash.client.post("/policy", data={**form, "policy": '{"default": {"n": 5}}'})
    assert refused.status_code == 422 and "must not exceed m" in refused.text
    assert read_policy(dash.redis, KEYS) is None
    assert (
        dash.client.post(
            "/policy", data={k: v for k, v in form.items() if k != "csrf_token"}
        ).status_code
        == 403
    )
    applied = dash.client.post("/policy", data=form, follow_redirects=False)
    assert applied.status_code == 303
    stored = read_policy(dash.redis, KEYS)
    assert stored is not None and stored.for_dimension(SV).threshold == 0.8
    assert stored.version in dash.client.get("/policy").text
    dash.login("analyst")
    assert dash.client.get("/policy").status_code == 403
