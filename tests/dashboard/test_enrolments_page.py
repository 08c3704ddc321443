"""The customer enrolments page and its API: analysts list a tenant's enrolments with
masked account ids and consent references (never the id itself, never a voiceprint);
admins expire (only ever sooner) or remove one by its page reference, audited with the
masked id; the bridges' enrolment key changes accordingly."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import Dash
from dash_factory import KEYS
from test_watchlist_api import voiceprint

from detectors.bus.biometrics import Enrolment

SUBJECT = "acct-55501234"


def _enrol(dash: Dash, subject: str, tenant: str = "bank", days: int | None = 90) -> None:
    h = dash.key_headers("analyst")
    body = {"tenant": tenant, "consent_ref": "IVR-consent-7731", "voiceprint": voiceprint()}
    if days is not None:
        body["expires_in_days"] = days
    made = dash.client.put(f"/api/v1/enrolments/{subject}", json=body, headers=h)
    assert made.status_code == 200, made.text


def _stored(dash: Dash, subject: str) -> Enrolment | None:
    raw = dash.redis.get(KEYS.enrolment("bank", subject))
    return None if raw is None else Enrolment.model_validate_json(raw)


def test_list_masks_and_admins_expire_and_remove(dash: Dash) -> None:
    _enrol(dash, SUBJECT)
    _enrol(dash, "acct-99907777", days=None)
    _enrol(dash, "acct-11112222", tenant="other")
    dash.redis.set(KEYS.enrolment("bank", "broken"), "{not json")
    listed = dash.client.get("/api/v1/enrolments?tenant=bank", headers=dash.key_headers("analyst"))
    assert listed.status_code == 200
    body = listed.json()
    assert body["unreadable"] == 1
    rows = {r["subject"]: r for r in body["enrolments"]}
    assert set(rows) == {"•••••••••1234", "•••••••••7777"}  # the other tenant's not listed
    assert SUBJECT not in listed.text and "IVR-consent-7731" not in listed.text
    assert "embedding" not in listed.text
    assert rows["•••••••••7777"]["expires_at"] is None
    ref = rows["•••••••••1234"]["ref"]

    dash.login("analyst")
    page = dash.client.get("/enrolments?tenant=bank").text
    assert "•••••••••1234" in page and SUBJECT not in page
    assert "data-en-remove" not in page  # analysts see; admins change
    dash.login("admin")
    page = dash.client.get("/enrolments?tenant=bank").text
    assert f'data-en-expire="{ref}"' in page and f'data-en-remove="{ref}"' in page

    h = dash.key_headers("admin")
    url = f"/api/v1/enrolments/by-ref/{ref}"
    later = dash.client.post(f"{url}/expire", json={"tenant": "bank", "in_days": 365}, headers=h)
    assert later.status_code == 409  # expiry is only ever brought forward
    soon = dash.client.post(f"{url}/expire", json={"tenant": "bank", "in_days": 7}, headers=h)
    assert soon.status_code == 200 and not soon.json()["expired"]
    now = dash.client.post(f"{url}/expire", json={"tenant": "bank"}, headers=h)
    assert now.status_code == 200 and now.json()["expired"]
    stored = _stored(dash, SUBJECT)
    assert stored is not None and stored.expired(datetime.fromtimestamp(dash.clock.now, UTC))
    assert stored.embedding  # the voiceprint is kept until removed or purged
    wrong_tenant = dash.client.delete(f"{url}?tenant=other", headers=h)
    assert wrong_tenant.status_code == 404
    assert dash.client.delete(f"{url}?tenant=bank", headers=h).status_code == 200
    assert _stored(dash, SUBJECT) is None
    assert dash.client.delete(f"{url}?tenant=bank", headers=h).status_code == 404

    audit = dash.client.portal.call(dash.ctx.audit.recent)
    mine = [e for e in audit if e["action"] in ("enrolment.expire", "enrolment.remove")]
    assert [e["action"] for e in mine] == [
        "enrolment.remove",
        "enrolment.expire",
        "enrolment.expire",
    ]
    assert all(e["target"] == "•••••••••1234" for e in mine)
    assert SUBJECT not in str(audit)
