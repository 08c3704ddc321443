"""The benign audio allowlist API on the real app and a real redis-server: the real
``callshield allowlist add DIR`` fingerprints espeak-ng prompts and posts them to a
dashboard under uvicorn; changes need the admin role and are audited; no response
carries a fingerprint; a bridge's candidate is listed, confirmed into an entry (the
version moves, the candidate goes) or rejected (kept, marked)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import uvicorn
from conftest import Dash, make_settings
from dash_factory import KEYS

from dashboard.app import create_app
from dashboard.auth import Role
from detectors.bus.allowlist import AllowlistEntry, Candidate
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from detectors.replay.allowlist_cli import fingerprint_file
from sip_bridge.cli import main


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ivr")
    for k, text in enumerate(("Welcome to the bank.", "Please hold, your call matters to us.")):
        subprocess.run(["espeak-ng", "-w", str(folder / f"p{k}.wav"), text], check=True)
    return folder


def _audit(dash: Dash) -> list[str]:
    return [e["action"] for e in dash.client.portal.call(dash.ctx.audit.recent)]


def _candidate(dash: Dash, prompts: Path, cand_id: str) -> Candidate:
    fp = fingerprint_file(prompts / "p1.wav", 0.5)
    now = datetime.now(UTC)
    cand = Candidate(
        cand_id=cand_id,
        fingerprint=fp["fingerprint"],
        frames=fp["frames"],
        distinct_anis=9,
        calls=12,
        first_seen=now,
        last_seen=now,
        node_id="node-1",
    )
    dash.redis.hset(KEYS.allowlist_candidates("default"), cand_id, cand.model_dump_json())
    return cand


def test_candidates_confirmed_or_rejected_by_admins_audited(dash: Dash, prompts: Path) -> None:
    first = _candidate(dash, prompts, "fc_" + "a" * 16)
    _candidate(dash, prompts, "fc_" + "b" * 16)
    analyst = dash.key_headers("analyst")
    listed = dash.client.get("/api/v1/allowlist/candidates", headers=analyst).json()
    assert [c["cand_id"] for c in listed["candidates"]] == [first.cand_id, "fc_" + "b" * 16]
    assert all("fingerprint" not in c for c in listed["candidates"])
    assert listed["candidates"][0]["distinct_anis"] == 9
    url = f"/api/v1/allowlist/candidates/{first.cand_id}/confirm"
    assert dash.client.post(url, json={"label": "hold"}, headers=analyst).status_code == 403
    admin = dash.key_headers("admin")
    done = dash.client.post(url, json={"label": "hold message"}, headers=admin)
    assert done.status_code == 201, done.text
    assert done.json()["version"] == 1 and "fingerprint" not in done.json()["entry"]
    stored = AllowlistEntry.model_validate_json(
        dash.redis.hget(KEYS.allowlist("default"), done.json()["entry"]["entry_id"])  # type: ignore[arg-type]
    )
    assert stored.fingerprint == first.fingerprint and stored.origin == "candidate"
    assert dash.redis.hget(KEYS.allowlist_candidates("default"), first.cand_id) is None
    assert dash.client.post(url, json={"label": "x"}, headers=admin).status_code == 404
    rej = dash.client.post(f"/api/v1/allowlist/candidates/{'fc_' + 'b' * 16}/reject", headers=admin)
    assert rej.status_code == 200
    assert dash.client.get("/api/v1/allowlist/candidates", headers=admin).json()["candidates"] == []
    everything = dash.client.get("/api/v1/allowlist/candidates?status=all", headers=admin).json()
    assert [c["status"] for c in everything["candidates"]] == ["rejected"]
    assert {"allowlist.confirm", "allowlist.reject"} <= set(_audit(dash))
    entries = dash.client.get("/api/v1/allowlist", headers=analyst).json()
    assert entries["version"] == 1 and len(entries["entries"]) == 1
    assert (
        dash.client.get("/api/v1/allowlist", headers=dash.key_headers("viewer")).status_code == 403
    )


def test_bad_fingerprints_are_refused(dash: Dash) -> None:
    admin = dash.key_headers("admin")
    bad = {"label": "x", "source": "a.wav", "fingerprint": "10.AAAA.AA", "frames": 10}
    resp = dash.client.post("/api/v1/allowlist", json={"audio": [bad]}, headers=admin)
    assert resp.status_code == 422
    assert dash.redis.get(KEYS.allowlist_version("default")) is None


@pytest.fixture
def served(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    settings = make_settings(listen=f"127.0.0.1:{port}", cookie_secure=False)
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix="cs-test:"
    )
    app = create_app(settings, bus)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_command_adds_a_folder_of_prompts(
    served: str,
    prompts: Path,
    redis_server: RedisServer,
    r: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", "cs-test:")
    monkeypatch.setenv("CALLSHIELD_STATE_DIR", str(tmp_path / "state"))
    keys = {}
    for role in (Role.ANALYST, Role.ADMIN):
        assert main(["dashboard", "create-api-key", f"k-{role.label}", "--role", role.label]) == 0
        keys[role] = capsys.readouterr().out.strip()
    (tmp_path / "analyst.key").write_text(keys[Role.ANALYST])
    (tmp_path / "admin.key").write_text(keys[Role.ADMIN])
    args = ["allowlist", "add", str(prompts), "--label", "IVR prompts", "--dashboard", served]
    assert main([*args, "--api-key", f"file:{tmp_path / 'analyst.key'}"]) == 1
    assert "403" in capsys.readouterr().err
    assert main([*args, "--api-key", f"file:{tmp_path / 'admin.key'}"]) == 0
    assert "added 2 files" in capsys.readouterr().out
    raw = r.hgetall(KEYS.allowlist("default"))
    entries = [AllowlistEntry.model_validate_json(v) for v in raw.values()]
    assert sorted(e.source for e in entries) == ["p0.wav", "p1.wav"]
    assert {e.label for e in entries} == {"IVR prompts"} and r.get(
        KEYS.allowlist_version("default")
    ) == b"2"
    assert all(e.added_by == "key:k-admin" for e in entries)
