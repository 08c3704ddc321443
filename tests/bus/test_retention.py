"""The alert stream is trimmed by age, but never past what a consumer group still needs."""

from __future__ import annotations

import redis

from detectors.bus.keys import Keys
from detectors.bus.retention import safe_min_id, trim_alerts


def test_trim_keeps_what_a_group_has_not_acknowledged(client: redis.Redis) -> None:
    keys = Keys("t:")
    for i in range(1, 11):
        client.xadd(keys.alerts, {"n": i}, id=f"{i}-0")
    client.xgroup_create(keys.alerts, "webhooks", id="0")
    client.xgroup_create(keys.alerts, "dashboard", id="0")
    got = client.xreadgroup("webhooks", "c1", {keys.alerts: ">"}, count=6)
    client.xack(keys.alerts, "webhooks", *[i for i, _ in got[0][1][:4]])  # 5-0, 6-0 pending
    client.xreadgroup("dashboard", "c1", {keys.alerts: ">"}, count=8, noack=True)
    assert safe_min_id(client, keys.alerts) == "5-0"
    assert trim_alerts(client, keys, retention_days=1, now_s=10_000_000) == 4
    assert client.xrange(keys.alerts)[0][0] == b"5-0"
    client.xack(keys.alerts, "webhooks", "5-0", "6-0")
    rest = client.xreadgroup("webhooks", "c1", {keys.alerts: ">"})
    client.xack(keys.alerts, "webhooks", *[i for i, _ in rest[0][1]])
    # webhooks has read and acked everything; dashboard read up to 8-0
    assert safe_min_id(client, keys.alerts) == "8-1"
    assert trim_alerts(client, keys, retention_days=1, now_s=10_000_000) == 4  # 5-0..8-0


def test_trim_by_age_only_without_groups(client: redis.Redis) -> None:
    keys = Keys("t:")
    now_ms = 100 * 86_400_000
    for day in (90, 95, 99):
        client.xadd(keys.alerts, {"d": day}, id=f"{day * 86_400_000}-0")
    assert trim_alerts(client, keys, retention_days=7, now_s=now_ms / 1000) == 1
    assert client.xlen(keys.alerts) == 2
