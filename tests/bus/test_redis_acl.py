"""``callshield redis-acl`` against a real redis-server: each component's real code path
works under its own ACL user, and nothing beyond it does (NOPERM)."""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from alert_factory import make_alert, make_event, make_score
from argon2 import PasswordHasher
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr
from receiver import Receiver

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.keys import DashKeys
from dashboard.settings import DashboardSettings
from detectors.alert_schema import event_id
from detectors.bus.acl import components, glob_escape
from detectors.bus.biometrics_store import read_entries, read_updates
from detectors.bus.connect import sync_client
from detectors.bus.keys import Keys
from detectors.bus.liveness import NodeLiveness
from detectors.bus.node_status import NodeStatus
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.retention import trim_alerts
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.admin import WebhookAdmin
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.store import EndpointStore
from sip_bridge.cli import main

PREFIX = "cs-test:"
PASSWORD = "correct horse battery staple"


def _url(server: RedisServer, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


@pytest.fixture
def acl(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """``callshield redis-acl --password-dir`` applied through the admin's REDIS_URL;
    returns each component's password."""
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", PREFIX)
    folder = tmp_path / "acl"
    assert main(["redis-acl", "--password-dir", str(folder)]) == 0
    monkeypatch.delenv("REDIS_URL")
    found = {p.stem: p.read_text().strip() for p in folder.glob("*.password")}
    assert set(found) == {"bridge", "dashboard", "webhooks", "retention"}
    assert all(oct(p.stat().st_mode)[-3:] == "600" for p in folder.glob("*.password"))
    return found


def _as(server: RedisServer, acl: dict[str, str], user: str) -> redis.Redis:
    return redis.Redis.from_url(_url(server, user, acl[user]), socket_timeout=5)


def _denied(fn: object, *args: object) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        fn(*args)  # type: ignore[operator]


def test_each_component_works_under_its_user_and_nothing_more(
    acl: dict[str, str],
    redis_server: RedisServer,
    client: redis.Redis,
    tmp_path: Path,
) -> None:
    keys = Keys(PREFIX)
    dash = DashKeys(keys)

    # --- bridge: the real publisher (Lua dedupe + XADD, scores, call state) -----------
    pw_file = tmp_path / "bridge.pw"
    pw_file.write_text(acl["bridge"] + "\n")
    pw_file.chmod(0o600)
    bridge_settings = BusSettings(
        redis_url=f"redis://bridge@127.0.0.1:{redis_server.port}/0",  # password from a file
        redis_password=SecretStr(f"file:{pw_file}"),
        state_dir=tmp_path / "bridge-state",
        key_prefix=PREFIX,
        retry_interval_s=0.05,
    )
    bridge_client = sync_client(bridge_settings)
    publisher = AlertPublisher(bridge_client, bridge_settings)
    publisher.start()
    alert = make_alert(1)
    publisher.publish_event(make_event(1, "started"))
    publisher.publish_alert(alert)
    publisher.publish_alert(alert)  # a retry: deduplicated by the script
    publisher.publish_score(make_score(1, 0))
    assert publisher.flush(10.0)
    publisher.close()
    assert publisher.stats.redis_errors == 0
    assert publisher.stats.alerts_published == 1 and publisher.stats.alerts_deduplicated == 1
    assert client.xlen(keys.alerts) == 1 and client.xlen(keys.scores) == 1
    assert client.zscore(keys.live_calls, "call-1") is not None

    bridge = _as(redis_server, acl, "bridge")
    assert bridge.hget(keys.watchlist("t1"), "subject") is None  # may read watchlists ...
    _denied(bridge.hset, keys.watchlist("t1"), "subject", "embedding")  # ... not write them
    _denied(bridge.hset, keys.enrolment("t1", "s1"), "v", "1")
    _denied(bridge.hset, dash.users, "mallory", "{}")
    _denied(bridge.xadd, keys.wh_log, {"x": "1"})
    _denied(bridge.xtrim, keys.alerts, 0)  # XTRIM is not among its commands
    _denied(bridge.flushall)

    # --- dashboard: the real app, login, alert queue, triage, health ---------------------
    dash_bus = BusSettings(
        redis_url=_url(redis_server, "dashboard", acl["dashboard"]),
        state_dir=tmp_path / "dash-state",
        key_prefix=PREFIX,
    )
    dash_settings = DashboardSettings(
        session_key=SecretStr("k" * 48), cookie_secure=True, listen="127.0.0.1:8080"
    )
    hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    app = create_app(dash_settings, dash_bus, password_hasher=hasher)
    with TestClient(app, base_url="https://testserver") as web:
        web.portal.call(app.state.ctx.users.create, "ana", PASSWORD, Role.ANALYST)
        login = web.post("/api/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        assert login.status_code == 200, login.text
        csrf = {"X-CSRF-Token": login.json()["csrf_token"]}
        listed = web.get("/api/v1/alerts")
        assert listed.status_code == 200, listed.text
        assert [a["alert_id"] for a in listed.json()] == [alert.alert_id]
        ack = web.post(f"/api/v1/alerts/{alert.alert_id}/ack", headers=csrf)
        assert ack.status_code == 200, ack.text
        assert ack.json()["triage"]["status"] == "acknowledged"
        assert web.get("/api/v1/calls/call-1").status_code == 200
        health = web.get("/api/v1/system")
        assert health.status_code == 200 and health.json()["redis_ok"], health.text
    assert client.xlen(dash.audit) == 1

    dashboard = _as(redis_server, acl, "dashboard")
    _denied(dashboard.xadd, keys.alerts, {"kind": "alert", "json": "{}"})
    _denied(dashboard.hset, keys.alert_seen(alert.alert_id), "latest", "{}")
    _denied(dashboard.xadd, keys.scores, {"kind": "score", "json": "{}"})
    _denied(dashboard.xadd, keys.events, {"kind": "call_event", "json": "{}"})
    _denied(dashboard.hset, keys.call("call-1"), "state", "ended")
    dashboard.hset(keys.watchlist("t1"), "subject", "x")  # the dashboard owns watchlists
    dashboard.incr(keys.watchlist_version("t1"))
    dashboard.xadd(keys.call_updates, {"json": "{}"})  # and writes mid-call updates
    # the bridge reads them with the code it runs (a MULTI, XREAD), writes neither
    assert read_entries(bridge, keys, "t1") == (1, [], 1)  # the bad entry counted
    assert read_updates(bridge, keys, "0-0", 1, lambda *_: None)[1] == []
    _denied(bridge.xadd, keys.call_updates, {"json": "{}"})
    _denied(bridge.incr, keys.watchlist_version("t1"))

    # --- webhooks: the CLI's endpoint store and the real dispatcher ----------------------
    receiver = Receiver()
    wh_settings = BusSettings(
        redis_url=_url(redis_server, "webhooks", acl["webhooks"]),
        state_dir=tmp_path / "wh-state",
        key_prefix=PREFIX,
        webhook_allow_private_targets=True,
    )
    fernet = Fernet(Fernet.generate_key())
    try:
        store = EndpointStore(sync_client(wh_settings), keys, fernet, True)
        _, secret = store.add(receiver.url, allow_private=True)
        receiver.secrets = [secret]

        async def deliver() -> Dispatcher:
            url = wh_settings.redis_url.get_secret_value()  # type: ignore[union-attr]
            d = Dispatcher(redis.asyncio.Redis.from_url(url), wh_settings, fernet)
            try:
                await d.setup()
                for _ in range(50):
                    await d.intake(block_ms=100)
                    await d.deliver_due()
                    if receiver.first:
                        break
            finally:
                await d.aclose()
            return d

        d = asyncio.run(deliver())
    finally:
        receiver.close()
    assert d.stats["delivered"] == 1 and len(receiver.first) == 1
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 0

    webhooks = _as(redis_server, acl, "webhooks")
    _denied(webhooks.xadd, keys.alerts, {"kind": "alert", "json": "{}"})  # reads, not writes
    _denied(webhooks.hset, keys.watchlist("t1"), "subject", "x")
    _denied(webhooks.hgetall, dash.users)
    _denied(webhooks.xrange, keys.alerts)  # only through its consumer group

    # --- the dashboard's webhook pages: the real admin code under the dashboard's user ----
    (endpoint,) = store.all()
    delivered = event_id(alert)
    client.sadd(keys.wh_parked, f"{endpoint.id}|parked-call")  # as the dispatcher parks

    async def manage() -> tuple[Any, ...]:
        url = dash_bus.redis_url.get_secret_value()  # type: ignore[union-attr]
        r = redis.asyncio.Redis.from_url(url)
        admin = WebhookAdmin(r, keys, fernet, allow_private_targets=True)
        try:
            health = await admin.health()
            added, _ = await admin.add(receiver.url, ("call.alert.*",), allow_private=True)
            assert await admin.set_enabled(endpoint.id, False, "maintenance") is not None
            assert await admin.set_enabled(endpoint.id, True, "") is not None
            replayed = await admin.replay(endpoint.id, delivered)  # delivered: sent again
            dead = await admin.dead_letters()
            assert await admin.delete(added.id)
            return health, replayed, dead
        finally:
            await r.aclose()

    health, replayed, dead = asyncio.run(manage())
    assert health[endpoint.id].recent_ok == 1 and health[endpoint.id].parked == 1
    assert replayed == 1 and dead == []
    assert client.zscore(keys.wh_due, f"{endpoint.id}|parked-call") is not None  # resumed
    assert client.hget(keys.wh_delivery(endpoint.id, delivered), "replays") == b"1"
    _denied(dashboard.xadd, keys.wh_log, {"x": "1"})  # the attempt log: read only
    _denied(dashboard.xgroup_create, keys.alerts, "mine", "0")

    # --- retention: trims the alert stream, nothing else -----------------------------------
    retention = _as(redis_server, acl, "retention")
    assert trim_alerts(retention, keys, retention_days=1.0, now_s=time.time() + 10 * 86400) == 1
    _denied(retention.xadd, keys.alerts, {"kind": "alert", "json": "{}"})
    _denied(retention.hgetall, keys.watchlist("t1"))


def test_node_liveness_and_the_reaper_under_the_bridge_user(
    acl: dict[str, str], redis_server: RedisServer, client: redis.Redis, tmp_path: Path
) -> None:
    """Heartbeat, reaping a restarted node's old calls (final alert revision included)
    and dropping the heartbeat, all as the bridge's ACL user."""
    keys = Keys(PREFIX)
    settings = BusSettings(
        redis_url=_url(redis_server, "bridge", acl["bridge"]),
        state_dir=tmp_path / "bridge-state",
        key_prefix=PREFIX,
        retry_interval_s=0.05,
    )
    bridge = sync_client(settings)
    publisher = AlertPublisher(bridge, settings)
    publisher.start()
    now = datetime.now(UTC)
    summary = NodeStatus(node_id=settings.node_id, boot=publisher.boot, state="ready", at=now)
    old = NodeLiveness(bridge, settings, publisher.boot, status=lambda: summary)
    old.beat()
    assert old.stats.status_errors == 0
    publisher.publish_event(make_event(1, "started"))
    publisher.publish_alert(make_alert(1))
    assert publisher.flush(10.0)
    publisher.close()
    restarted = NodeLiveness(bridge, settings, "new-boot")  # the same node id, restarted
    assert restarted.tick() == ["call-1"]
    assert client.hget(keys.call("call-1"), "state") == b"ended"
    assert client.xlen(keys.alerts) == 2  # the final revision, call_state ended
    restarted.close()
    assert not client.exists(keys.node(settings.node_id))
    assert restarted.stats.redis_errors == 0
    dashboard = _as(redis_server, acl, "dashboard")
    assert dashboard.get(keys.node_status(settings.node_id)) == summary.model_dump_json().encode()
    assert dashboard.hgetall(keys.nodes) == {b"new-boot": settings.node_id.encode()}
    _denied(dashboard.set, keys.node_status(settings.node_id), "x")
    _denied(dashboard.set, keys.node(settings.node_id), "x")  # liveness is the bridges'


class _AclFileServer(RedisServer):
    """A redis-server that loads its users from an ACL file."""

    aclfile: Path | None = None

    def config_text(self) -> str:
        return super().config_text() + f"aclfile {self.aclfile}\n"


@pytest.fixture
def acl_file_server(tmp_path: Path) -> Iterator[_AclFileServer]:
    server = _AclFileServer(data_dir=tmp_path / "aclredis", port=free_port())
    server.aclfile = tmp_path / "users.acl"
    yield server
    server.stop()


def test_allowlist_and_fingerprints_under_the_bridge_and_dashboard_users(
    acl: dict[str, str], redis_server: RedisServer
) -> None:
    """The bridge's replay state (fp:log, candidates, allowlist reads) and the
    dashboard's allowlist store (add, confirm, reject) under their own users."""
    from datetime import UTC, datetime

    import numpy as np

    from detectors.bus.allowlist import AllowlistEntry, AllowlistStore, Candidate, new_entry_id
    from detectors.replay.fingerprint import Fingerprint, encode
    from detectors.replay.index import Clip
    from detectors.replay.shared_state import RedisReplayState

    keys = Keys(PREFIX)
    rng = np.random.default_rng(7)
    fp = Fingerprint(
        rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32), np.ones(200, bool)
    )
    now = datetime.now(UTC)
    bridge = _as(redis_server, acl, "bridge")
    node_a = RedisReplayState(bridge, keys, "node-a")
    node_b = RedisReplayState(_as(redis_server, acl, "bridge"), keys, "node-b")
    for node in (node_a, node_b):
        node.follow("default")
        node.refresh()  # cursors at the stream's end, empty allowlists
    node_a.publish(Clip("fp_1", fp, "call-1", now.timestamp(), 0.0, "a" * 32))
    cand = Candidate(
        cand_id="fc_" + "1" * 16,
        fingerprint=encode(fp),
        frames=200,
        distinct_anis=5,
        calls=5,
        first_seen=now,
        last_seen=now,
        node_id="node-a",
    )
    node_a.propose(cand)
    node_a.relate("call-2", "call-1")  # call-2 replays what call-1 heard
    node_a.refresh()  # XADD to fp:log, HSET the candidate, SADD the relation
    node_b.refresh()  # XREAD: the other node's clip
    assert node_b.stats.received == 1 and node_b.stats.redis_errors == 0
    assert node_b.recent().query(fp)[0].clip.owner == "call-1"
    _denied(bridge.hset, keys.allowlist("default"), "al_x", "{}")  # reads, never writes it
    _denied(bridge.incr, keys.allowlist_version("default"))
    reader = _as(redis_server, acl, "dashboard")
    assert reader.smembers(keys.replay_related("call-1")) == {b"call-2"}
    _denied(reader.sadd, keys.replay_related("call-1"), "call-3")

    dashboard = redis.asyncio.Redis.from_url(_url(redis_server, "dashboard", acl["dashboard"]))
    store = AllowlistStore(dashboard, keys)

    async def admin() -> None:
        (found,), _ = await store.candidates("default")
        entry = AllowlistEntry(
            entry_id=new_entry_id(),
            label="hold music",
            source=f"candidate {found.cand_id}",
            origin="candidate",
            fingerprint=found.fingerprint,
            frames=found.frames,
            added_by="admin",
            created_at=now,
        )
        assert await store.confirm(found, entry) == 1
        other = cand.model_copy(update={"cand_id": "fc_" + "2" * 16})
        await dashboard.hset(
            keys.allowlist_candidates("default"), other.cand_id, other.model_dump_json()
        )
        await store.reject(other)
        await dashboard.aclose()

    asyncio.run(admin())
    node_b.refresh()
    allow = node_b.allowlist("default")
    assert allow is not None and allow.query(fp)
    assert node_b.known_candidate("default", "fc_" + "2" * 16)  # rejected: never again
    _denied(_as(redis_server, acl, "webhooks").hgetall, keys.allowlist("default"))


def test_printed_lines_are_an_acl_file_redis_loads(
    acl_file_server: _AclFileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", "t*:")  # a glob character in the prefix
    monkeypatch.setenv("BRIDGE_PW", "bridge password 1")
    monkeypatch.delenv("REDIS_URL", raising=False)
    rc = main(
        ["redis-acl", "--print", "--component", "bridge", "--password", "bridge=env:BRIDGE_PW"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "bridge password 1" not in printed  # only its SHA-256
    assert acl_file_server.aclfile is not None
    # the default user may only PING (the readiness probe); an admin has a user of its own
    locked = "user default on nopass resetkeys -@all +ping\nuser admin on >admin-pw ~* &* +@all\n"
    acl_file_server.aclfile.write_text(printed + locked)
    acl_file_server.start()
    url = f"redis://bridge:bridge%20password%201@127.0.0.1:{acl_file_server.port}/0"
    bridge = redis.Redis.from_url(url, socket_timeout=5)
    bridge.xadd("t*:scores", {"kind": "score", "json": "{}"})
    _denied(bridge.xadd, "tX:scores", {"kind": "score", "json": "{}"})  # '*' is literal
    _denied(bridge.hset, "t*:watchlist:t1", "s", "e")
    _denied(redis.Redis(port=acl_file_server.port, socket_timeout=5).get, "t*:scores")


def test_missing_password_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert main(["redis-acl", "--print"]) == 2
    assert "no password for bridge" in capsys.readouterr().err


def _layout(prefix: str) -> list[str]:
    """Every key the layout builds (``Keys`` and ``DashKeys``), ids filled with "x"."""
    out: list[str] = []
    for obj in (Keys(prefix), DashKeys(Keys(prefix))):
        for name in dir(type(obj)):
            attr = getattr(type(obj), name)
            if name.startswith("_"):
                continue
            if isinstance(attr, property):
                out.append(getattr(obj, name))
            elif inspect.isfunction(attr):
                n = len(inspect.signature(attr).parameters) - 1
                out.append(getattr(obj, name)(*["x"] * n))
    return out


def test_every_key_of_the_layout_belongs_to_a_component() -> None:
    """A key added to the layout without a grant would be NOPERM for every user."""
    table = components(PREFIX)
    patterns = [
        p.split("~", 1)[1].replace("\\", "")
        for c in table.values()
        for g in (c.root, *c.selectors)
        for p in g.keys
    ]
    every = _layout(PREFIX)
    assert len(every) >= 25
    for key in every:
        assert any(fnmatch.fnmatchcase(key, p) for p in patterns), key
    assert glob_escape("a*b?[c]\\") == "a\\*b\\?\\[c\\]\\\\"


def test_caller_id_velocity_under_the_bridge_user(
    acl: dict[str, str], redis_server: RedisServer
) -> None:
    """The caller_id detector's ANI counters (ani:*) work under the bridge's user; the
    dashboard's user cannot touch them."""
    from detectors.caller_id.rules import CallerIdConfig
    from detectors.caller_id.velocity import AniVelocity

    keys = Keys(PREFIX)
    vel = AniVelocity(_as(redis_server, acl, "bridge"), keys, CallerIdConfig())
    h = "ab" * 16
    assert vel.observe("c1", h, True, time.time()).concurrent == 1
    v = vel.observe("c2", h, False, time.time())
    assert (v.concurrent, v.recent, v.attested_before) == (2, 2, 1)
    vel.end("c1", h)
    assert vel.observe("c3", h, False, time.time()).concurrent == 2
    _denied(_as(redis_server, acl, "dashboard").zcard, keys.ani_counter("live", h))
