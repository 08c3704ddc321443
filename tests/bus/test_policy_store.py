"""The alert policy as data: scope resolution (most specific wins, per dimension),
validation, versions from content and counter; stored in a real redis-server by the
dashboard's store and picked up by the bridge's watcher (a refused policy leaves the one
in force; deleting it brings back the built-in one); the bridge's Redis user may only
read it, the dashboard's may write it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
import redis.asyncio
from pydantic import ValidationError

from detectors.alert_schema import Band, Dimension
from detectors.bus.calibration import Dataset
from detectors.bus.calibration_load import load_async
from detectors.bus.keys import Keys
from detectors.bus.policy import DimensionPolicy, Policy, PolicyBody, Scope
from detectors.bus.policy_store import PolicyConflictError, PolicyStore, read_policy
from detectors.bus.policy_watch import PolicyWatcher
from detectors.bus.redis_server import RedisServer
from sip_bridge.cli import main

SV, KF, VM = Dimension.SYNTHETIC_VOICE, Dimension.KNOWN_FRAUDSTER, Dimension.VOICE_MISMATCH
KEYS = Keys("cs-pol:")


def _scoped() -> PolicyBody:
    return PolicyBody.model_validate(
        {
            "default": {"threshold": 0.5},
            "dimensions": {"synthetic_voice": {"threshold": 0.6}},
            "tenants": {
                "bank": {
                    "dimensions": {"synthetic_voice": {"threshold": 0.7}},
                    "queues": {"vip": {"dimensions": {"synthetic_voice": {"threshold": 0.9}}}},
                    "dnis": {
                        "8005550100": {
                            "dimensions": {
                                "synthetic_voice": {"threshold": 0.8},
                                "replay": {"threshold": 0.3, "n": 1, "m": 1},
                            }
                        }
                    },
                }
            },
        }
    )


@pytest.mark.parametrize(
    ("scope", "dim", "threshold"),
    [
        (None, SV, 0.6),  # the dimension's own rule
        (None, Dimension.REPLAY, 0.5),  # the default
        (Scope("other"), SV, 0.6),  # an unknown tenant: default level
        (Scope("bank"), SV, 0.7),
        (Scope("bank", queue="vip"), SV, 0.9),  # queue beats DNIS beats tenant
        (Scope("bank", queue="vip", dnis="8005550100"), SV, 0.9),
        (Scope("bank", queue="other", dnis="8005550100"), SV, 0.8),
        (Scope("bank", dnis="8005550100"), Dimension.REPLAY, 0.3),
        (Scope("bank", queue="vip"), Dimension.REPLAY, 0.5),  # vip names only SV
        (Scope("bank", dnis="8005550199"), SV, 0.7),
    ],
)
def test_most_specific_scope_wins_per_dimension(
    scope: Scope | None, dim: Dimension, threshold: float
) -> None:
    policy = _scoped().versioned(1)
    assert policy.for_dimension(dim, scope).threshold == threshold
    assert policy.resolve(scope)[dim].threshold == threshold


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"default": {"n": 4, "m": 3}}, "must not exceed m"),
        ({"default": {"threshold": 0.5, "release": 0.6}}, "release"),
        ({"default": {"threshold": 1.5}}, "less than or equal to 1"),
        ({"default": {"max_band": "low"}}, "alerting false"),
        ({"dimensions": {"telepathy": {}}}, "synthetic_voice"),
        ({"tenants": {"Bad Tenant": {}}}, "pattern"),
        ({"tenants": {"t": {"queues": {"a b": {}}}}}, "pattern"),
        ({"early_media_alerts": True}, "early_media_alerts"),
        ({"default": {"threshold": 0.5, "thresold": 0.4}}, "Extra inputs"),
        ({"default": {"m": 1000}}, "less than or equal to 100"),
    ],
)
def test_bad_policies_are_refused_with_a_clear_reason(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicyBody.model_validate(change)


def test_version_is_counter_and_content_hash() -> None:
    body = _scoped()
    one, again = body.versioned(3), PolicyBody.model_validate_json(body.model_dump_json())
    assert one.version == f"3-{body.content_hash()}" and one.version.startswith("3-")
    assert again.content_hash() == body.content_hash()
    changed = body.model_copy(update={"default": DimensionPolicy(threshold=0.55)})
    assert changed.content_hash() != body.content_hash()
    assert Policy().version == f"0-{PolicyBody().content_hash()}"
    one.check_version()
    forged = Policy.model_validate({**one.model_dump(mode="json"), "version": "3-000000000000"})
    with pytest.raises(ValueError, match="does not match"):
        forged.check_version()
    # thresholds an alert carries
    assert one.for_dimension(SV).used() == {
        "threshold": 0.6,
        "high": 0.8,
        "release": pytest.approx(0.5),
        "n": 2.0,
        "m": 3.0,
        "min_net_speech_s": 0.0,
        "max_alerts_per_call": 3.0,
    }
    assert Policy().for_dimension(VM).max_band is Band.ELEVATED


def test_dimensions_a_policy_does_not_name_keep_their_built_in_rule() -> None:
    only_sv = PolicyBody.model_validate({"dimensions": {"synthetic_voice": {"threshold": 0.7}}})
    assert not only_sv.for_dimension(Dimension.SPEECH_ACTIVITY).alerting
    assert only_sv.for_dimension(VM) == Policy().for_dimension(VM)
    assert only_sv.for_dimension(SV).threshold == 0.7
    assert only_sv.for_dimension(Dimension.REPLAY) == only_sv.default
    loud = PolicyBody.model_validate({"dimensions": {"speech_activity": {"alerting": True}}})
    assert loud.for_dimension(Dimension.SPEECH_ACTIVITY).alerting  # named: the admin's rule


def _store_apply(url: str, body: PolicyBody, base: str | None = None) -> Policy:
    async def go() -> Policy:
        r = redis.asyncio.Redis.from_url(url)
        try:
            return await PolicyStore(r, KEYS).apply(body, base)
        finally:
            await r.aclose()

    return asyncio.run(go())


def test_stored_policy_reaches_the_watcher_and_bad_ones_do_not(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    applied: list[Policy] = []
    watcher = PolicyWatcher(client, KEYS, applied.append)
    assert not watcher.check()  # nothing stored: the built-in policy stays, nothing applied
    assert watcher.stats.version == Policy().version

    first = _store_apply(redis_server.url, _scoped())
    assert first.version.startswith("1-")
    assert watcher.check() and applied == [first]
    assert read_policy(client, KEYS) == first
    assert not watcher.check()  # no change, no reload

    with pytest.raises(PolicyConflictError):
        _store_apply(redis_server.url, PolicyBody(), base=Policy().version)
    second = _store_apply(redis_server.url, PolicyBody(), base=first.version)
    assert second.version.startswith("2-")
    assert watcher.check() and applied[-1] == second

    # a stored policy whose content does not match its version: refused, counted
    forged = second.model_dump(mode="json")
    forged["default"]["threshold"] = 0.01
    client.set(KEYS.policy, Policy.model_validate(forged).model_dump_json())
    assert not watcher.check()  # the version key did not move: not even read
    client.set(KEYS.policy_version, "9-000000000000")
    assert not watcher.check()
    assert watcher.stats.rejected == 1 and watcher.stats.version == second.version
    client.set(KEYS.policy, "{not json")
    client.set(KEYS.policy_version, "10-000000000000")
    assert not watcher.check() and watcher.stats.rejected == 2

    client.delete(KEYS.policy, KEYS.policy_version)  # back to the built-in policy
    assert watcher.check() and applied[-1] == Policy()
    assert watcher.stats.reloads == 3


def test_watcher_thread_swaps_the_policy(client: redis.Redis, redis_server: RedisServer) -> None:
    applied: list[Policy] = []
    watcher = PolicyWatcher(client, KEYS, applied.append, interval_s=0.05)
    watcher.start()
    try:
        stored = _store_apply(redis_server.url, _scoped())
        for _ in range(200):
            if applied:
                break
            asyncio.run(asyncio.sleep(0.02))
        assert applied == [stored]
    finally:
        watcher.close()


def test_bridge_user_reads_the_policy_and_cannot_write_it(
    redis_server: RedisServer, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", KEYS.prefix)
    folder = tmp_path / "acl"
    assert main(["redis-acl", "--password-dir", str(folder)]) == 0
    pw = {p.stem: p.read_text().strip() for p in folder.glob("*.password")}

    def url(user: str) -> str:
        return f"redis://{user}:{pw[user]}@127.0.0.1:{redis_server.port}/0"

    stored = _store_apply(url("dashboard"), _scoped())  # the dashboard's own store code

    async def what_if_data() -> Dataset:  # the what-if's reads, as the dashboard
        r = redis.asyncio.Redis.from_url(url("dashboard"))
        try:
            return await load_async(r, KEYS, 86400.0)
        finally:
            await r.aclose()

    assert asyncio.run(what_if_data()).counts()["scores_read"] == 0
    bridge = redis.Redis.from_url(url("bridge"), socket_timeout=5)
    try:
        applied: list[Policy] = []
        watcher = PolicyWatcher(bridge, KEYS, applied.append)
        assert watcher.check() and applied == [stored]
        for write in (
            lambda: bridge.set(KEYS.policy, "{}"),
            lambda: bridge.set(KEYS.policy_version, "1-x"),
            lambda: bridge.incr(KEYS.policy_counter),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                write()
    finally:
        bridge.close()
