"""The two-person approval and a subject's erasure work under the dashboard's own Redis
ACL user (``callshield redis-acl``), and the grants they needed stay narrow: the
dashboard may delete fingerprints from ``fp:log`` but not add any, nor touch alerts."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from argon2 import PasswordHasher
from fastapi.testclient import TestClient
from pydantic import SecretStr
from test_redis_acl import PASSWORD, PREFIX, _as, _denied, _url
from test_redis_acl import acl as _acl

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.bus.allowlist import LogRecord
from detectors.bus.biometrics import (
    CallUpdate,
    Enrolment,
    WatchlistEntry,
    encode_embedding,
    new_id,
)
from detectors.bus.evidence import EvidenceKind, EvidenceMeta, EvidenceVault
from detectors.bus.evidence_store import EvidenceWriter
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

DIM = 16
NOW = datetime.now(UTC)


def _vp() -> dict[str, object]:
    v = [1.0 / DIM**0.5] * DIM
    return {
        "model": "m@1",
        "dim": DIM,
        "embedding": encode_embedding(struct.pack(f"<{DIM}f", *v)),
        "net_speech_s": 5.0,
        "source": "wav:x",
        "added_by": "ana",
        "created_at": NOW,
    }


@pytest.fixture
def acl(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """``test_redis_acl``'s: ``callshield redis-acl`` applied, each component's password."""
    found: dict[str, str] = _acl.__wrapped__(redis_server, tmp_path, monkeypatch)  # type: ignore[attr-defined]
    return found


def test_approval_and_erasure_under_the_dashboard_user(
    acl: dict[str, str], redis_server: RedisServer, client: redis.Redis, tmp_path: Path
) -> None:
    keys = Keys(PREFIX)
    pending = WatchlistEntry(
        entry_id=new_id("wl"),
        tenant="bank",
        label="caller",
        legal_basis="art. 9(2)(f)",
        case_ref="FR-1",
        expires_at=NOW + timedelta(days=3),
        status="pending",
        **_vp(),  # type: ignore[arg-type]
    )
    client.hset(keys.watchlist("bank"), pending.entry_id, pending.model_dump_json())
    enrol = Enrolment(subject="acct-9", tenant="bank", consent_ref="IVR-9", **_vp())  # type: ignore[arg-type]
    client.set(keys.enrolment("bank", "acct-9"), enrol.model_dump_json())
    claim = CallUpdate(
        command_id=new_id("cu"), call_id="c-1", claimed_account="acct-9", requested_by="x", at=NOW
    )
    client.xadd(keys.call_updates, {"json": claim.model_dump_json()})
    rec = LogRecord(
        clip_id="k", node_id="n", owner="c-1", seen_at=1.0, start_s=0.0, fingerprint="1.AAAAAA.AQ"
    )
    client.xadd(keys.fingerprint_log, {"r": rec.model_dump_json()})
    meta = EvidenceMeta(
        kind=EvidenceKind.EMBEDDING,
        evidence_id="embedding",
        tenant="bank",
        call_id="c-1",
        node_id="n",
        created_at=NOW,
        expires_at=NOW + timedelta(days=7),
    )
    EvidenceWriter(client, keys, 3600).write(meta, EvidenceVault(b"k" * 32).seal(meta, b"v" * 64))

    dash_bus = BusSettings(
        redis_url=_url(redis_server, "dashboard", acl["dashboard"]),
        state_dir=tmp_path / "dash-state",
        key_prefix=PREFIX,
    )
    settings = DashboardSettings(
        session_key=SecretStr("k" * 48), cookie_secure=True, listen="127.0.0.1:8080"
    )
    hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    app = create_app(settings, dash_bus, password_hasher=hasher)
    with TestClient(app, base_url="https://testserver") as web:
        web.portal.call(app.state.ctx.users.create, "bob", PASSWORD, Role.ANALYST)
        _, admin_key = web.portal.call(app.state.ctx.api_keys.create, "adm", Role.ADMIN)
        login = web.post("/api/v1/auth/login", json={"username": "bob", "password": PASSWORD})
        csrf = {"X-CSRF-Token": login.json()["csrf_token"]}
        ok = web.post(f"/api/v1/watchlist/{pending.entry_id}/approve?tenant=bank", headers=csrf)
        assert ok.status_code == 200, ok.text
        web.cookies.clear()
        erased = web.request(
            "DELETE",
            "/api/v1/subjects/acct-9",
            json={"reason": "erasure request 5"},
            headers={"Authorization": f"Bearer {admin_key}"},
        )
        assert erased.status_code == 200, erased.text
        body = erased.json()
        assert (body["enrolments"], body["call_updates"], body["fingerprints"]) == (1, 1, 1)
        assert body["evidence_records"] == 1
    assert not client.exists(keys.enrolment("bank", "acct-9"))
    assert client.xlen(keys.fingerprint_log) == 0 and client.xlen(keys.call_updates) == 0
    assert not client.exists(keys.evidence_index("c-1"), keys.evidence("c-1", "embedding"))
    dashboard = _as(redis_server, acl, "dashboard")
    _denied(dashboard.xadd, keys.fingerprint_log, {"r": "{}"})  # delete, never forge
    _denied(dashboard.xdel, keys.alerts, "0-1")
    _denied(dashboard.delete, keys.call("c-1"))
