"""Node liveness and the reaper (``detectors.bus.liveness``) against a real redis-server:
two publishers as two bridge nodes, one node's heartbeat expires, the survivor's reaper
ends exactly that node's live calls with reason ``node_lost`` (call event, call hash,
``calls:live``, a final alert revision), once; a node that comes back, or restarts
under the same node id, does not bring reaped calls back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from alert_factory import make_alert, make_event

from detectors.alert_schema import Alert, CallEvent, CallState
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.liveness import NODE_LOST, NodeLiveness
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

PREFIX = "cs-test:"


def _settings(tmp: Path, server: RedisServer, node: str) -> BusSettings:
    return BusSettings(
        redis_url=server.url,
        state_dir=tmp / node,
        key_prefix=PREFIX,
        node_id=node,
        retry_interval_s=0.05,
        node_heartbeat_s=0.5,  # heartbeat TTL 1.5 s, reaper lock 0.5 s
    )


class _Node:
    def __init__(self, tmp: Path, server: RedisServer, name: str) -> None:
        self.settings = _settings(tmp, server, name)
        self.client = redis.Redis.from_url(server.url, socket_timeout=5)
        self.pub = AlertPublisher(self.client, self.settings)
        self.pub.start()
        self.live = NodeLiveness(self.client, self.settings, self.pub.boot)
        self.live.beat()

    def send(self, *items: CallEvent | Alert) -> None:
        for item in items:
            if isinstance(item, Alert):
                self.pub.publish_alert(item)
            else:
                self.pub.publish_event(item)
        assert self.pub.flush(10.0)

    def close(self) -> None:
        self.pub.close()
        self.client.close()


@pytest.fixture
def nodes(tmp_path: Path, redis_server: RedisServer) -> Iterator[dict[str, _Node]]:
    made = {n: _Node(tmp_path, redis_server, n) for n in ("node-a", "node-b")}
    yield made
    for n in made.values():
        n.close()


def _ended(client: redis.Redis, keys: Keys, call_id: str) -> list[CallEvent]:
    events = [decode(f) for _, f in client.xrange(keys.events)]
    return [
        e
        for e in events
        if isinstance(e, CallEvent) and e.call_id == call_id and e.event == "ended"
    ]


def _reap(node: _Node, client: redis.Redis, keys: Keys) -> list[str]:
    client.delete(keys.reaper_lock)  # the previous pass's lock: not waited out
    return node.live.tick()


def _expire(client: redis.Redis, keys: Keys, node: str) -> None:
    """Wait for the node's heartbeat to lapse by its TTL (it is never renewed here)."""
    deadline = time.monotonic() + 10
    while client.exists(keys.node(node)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.exists(keys.node(node))


def test_a_lost_nodes_calls_end_once_and_a_live_nodes_never(
    nodes: dict[str, _Node], client: redis.Redis
) -> None:
    keys = Keys(PREFIX)
    a, b = nodes["node-a"], nodes["node-b"]
    a.send(make_event(1, "started"))
    b.send(make_event(2, "started"), make_alert(2), make_event(3, "started"))
    b.send(make_event(3, "ended"))  # ended normally before the node is lost
    assert client.hget(keys.call("call-2"), "node") == b"node-b"

    # both alive: a pass reaps nothing
    b.live.beat()
    assert _reap(a, client, keys) == []
    assert {m.decode() for m in client.zrange(keys.live_calls, 0, -1)} == {"call-1", "call-2"}

    # node-b stops beating: node-a's reaper ends call-2, and only call-2
    _expire(client, keys, "node-b")
    assert _reap(a, client, keys) == ["call-2"]
    assert {m.decode() for m in client.zrange(keys.live_calls, 0, -1)} == {"call-1"}
    state = client.hgetall(keys.call("call-2"))
    assert state[b"state"] == b"ended" and state[b"reaped"] == NODE_LOST.encode()
    assert 0 < client.ttl(keys.call("call-2")) <= b.settings.call_state_ttl_s
    (end,) = _ended(client, keys, "call-2")
    assert end.reason == NODE_LOST
    alerts = [m for _, f in client.xrange(keys.alerts) if isinstance(m := decode(f), Alert)]
    assert [(x.revision, x.call_state) for x in alerts] == [
        (1, CallState.LIVE),
        (2, CallState.ENDED),
    ]
    assert client.hget(keys.call("call-1"), "state") == b"started"  # node-a's: untouched
    assert _ended(client, keys, "call-1") == [] and _ended(client, keys, "call-3") != []
    assert client.hgetall(keys.nodes) == {a.pub.boot.encode(): b"node-a"}

    # idempotent: nothing left to reap, nothing written twice
    events, streamed = client.xlen(keys.events), client.xlen(keys.alerts)
    assert _reap(a, client, keys) == [] and a.live.reaper.reap() == []
    assert (client.xlen(keys.events), client.xlen(keys.alerts)) == (events, streamed)

    # node-b comes back (same process): its late events do not make call-2 live again
    b.live.beat()
    b.send(make_event(2, "updated"))
    assert b.pub.stats.events_after_reap == 1
    assert client.zscore(keys.live_calls, "call-2") is None
    assert client.hget(keys.call("call-2"), "state") == b"ended"
    b.send(make_event(2, "ended"))  # its own end: kept in the stream, the hash stays
    assert client.hget(keys.call("call-2"), "reaped") == NODE_LOST.encode()
    assert _reap(a, client, keys) == []  # and node-b, alive again, is not reaped


def test_a_node_restarted_under_its_id_is_a_new_owner(
    nodes: dict[str, _Node], tmp_path: Path, redis_server: RedisServer, client: redis.Redis
) -> None:
    keys = Keys(PREFIX)
    a, b = nodes["node-a"], nodes["node-b"]
    b.send(make_event(4, "started"))
    # the process is replaced before its heartbeat expires: the new one's boot id takes
    # over the heartbeat, so the old process's calls are lost at once
    again = _Node(tmp_path / "again", redis_server, "node-b")
    try:
        again.send(make_event(5, "started"))
        assert _reap(a, client, keys) == ["call-4"]
        assert client.zscore(keys.live_calls, "call-5") is not None
        assert _reap(a, client, keys) == []
    finally:
        again.close()


def test_an_unreadable_call_state_is_ended_and_counted(
    nodes: dict[str, _Node], client: redis.Redis
) -> None:
    keys = Keys(PREFIX)
    a, b = nodes["node-a"], nodes["node-b"]
    b.send(make_event(6, "started"), make_event(7, "started"))
    client.hset(keys.call("call-6"), "json", "{not json")
    client.delete(keys.node("node-b"))
    assert sorted(_reap(a, client, keys)) == ["call-6", "call-7"]
    assert a.live.stats.bad_calls == 1
    assert [e.reason for e in _ended(client, keys, "call-6")] == [NODE_LOST]


def test_a_closed_node_drops_its_heartbeat_and_runs_the_thread(
    tmp_path: Path, redis_server: RedisServer, client: redis.Redis
) -> None:
    keys = Keys(PREFIX)
    node = _Node(tmp_path, redis_server, "node-c")
    try:
        node.live.start()
        deadline = time.monotonic() + 10
        while node.live.stats.beats < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert node.live.stats.beats >= 3 and node.live.stats.redis_errors == 0
        assert client.get(keys.node("node-c")) == node.pub.boot.encode()
        node.live.close()
        assert not client.exists(keys.node("node-c"))
    finally:
        node.close()
