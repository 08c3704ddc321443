"""R3 with real processes: ``callshield webhooks run`` as a subprocess delivers a steady
stream of alert revisions (the real publisher, a real redis-server) to two real HTTP
receivers, and is SIGKILLed several times mid-stream and restarted. Every revision
reaches each receiver at least once and, deduplicated by ``webhook-id``, exactly once;
each call's revisions arrive in order; nothing is left pending, queued or dead.

What a kill leaves behind and what takes it over: entries read but not acknowledged
(the restarted dispatcher, same consumer name, queues its own pending entries before
new ones), queue heads claimed mid-send (their lease, ``CALLSHIELD_WEBHOOK_CLAIM_LEASE_S``,
runs out and they are tried again), a delivery the receiver took whose answer the dead
dispatcher never read (sent again: a duplicate the receiver drops by ``webhook-id``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from alert_factory import make_alert
from cryptography.fernet import Fernet
from receiver import Receiver, ids_by_call

from detectors.alert_schema import event_id
from detectors.bus.keys import Keys
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

CALLS = 30
REVISIONS = 6
RATE = 30.0  # alert revisions per second, steady
KILL_AT = (0.15, 0.3, 0.45, 0.6, 0.75)  # share of the stream delivered at each kill


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    rs = [Receiver(delay_s=0.02), Receiver(delay_s=0.005)]
    yield rs
    for r in rs:
        r.close()


def _env(settings: BusSettings, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CALLSHIELD_REDIS_URL": settings.redis_url.get_secret_value(),  # type: ignore[union-attr]
        "CALLSHIELD_KEY_PREFIX": settings.key_prefix,
        "CALLSHIELD_STATE_DIR": str(tmp_path / "dispatcher-state"),
        "CALLSHIELD_NODE_ID": "dispatcher-1",  # the consumer name, kept across restarts
        "CALLSHIELD_WEBHOOK_KEY": Fernet.generate_key().decode(),
        "CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
        "CALLSHIELD_WEBHOOK_REALTIME_TIMEOUT_S": "1",
        "CALLSHIELD_WEBHOOK_DURABLE_TIMEOUT_S": "1",
        "CALLSHIELD_WEBHOOK_CLAIM_LEASE_S": "1.5",
    }


def _cli(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "webhooks", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sip_bridge.cli", "webhooks", "run"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkilled_dispatcher_process_delivers_every_revision_once_in_order(
    settings: BusSettings,
    redis_server: RedisServer,
    client: redis.Redis,
    receivers: list[Receiver],
    tmp_path: Path,
) -> None:
    env = _env(settings, tmp_path)
    for r in receivers:
        out = _cli(env, "add", r.url, "--allow-private")
        r.secrets = [out.split("secret (shown once):")[1].strip()]
    alerts = [
        make_alert(c, revision=v, seq=v) for v in range(1, REVISIONS + 1) for c in range(CALLS)
    ]
    published = [event_id(a) for a in alerts]
    total = len(published)
    pub = AlertPublisher(redis.Redis.from_url(redis_server.url), settings)
    pub.start()
    handed: list[int] = [0]

    def publish() -> None:
        start = time.perf_counter()
        for i, a in enumerate(alerts):
            delay = start + i / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pub.publish_alert(a)
            handed[0] = i + 1

    log = tmp_path / "dispatcher.log"
    proc = _start(env, log)
    publisher = threading.Thread(target=publish)
    publisher.start()
    kills: list[tuple[int, int]] = []  # (handed to the publisher, delivered) at each kill
    try:
        for share in KILL_AT:
            want = int(share * total)
            _wait(lambda w=want: len(receivers[0].first) >= w, 20, f"{want} deliveries")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills.append((handed[0], len(receivers[0].first)))
            proc = _start(env, log)
        publisher.join()
        assert pub.flush(10)
        keys = Keys(settings.key_prefix)
        _wait(
            lambda: all(len(r.first) == total for r in receivers),
            30,
            "every revision at every receiver",
        )
        # a delivery the receiver took just before a kill is sent again once its lease
        # runs out: the dispatcher is done when no queue head is left
        _wait(lambda: client.zcard(keys.wh_due) == 0, 10, "the delivery queues to empty")
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        publisher.join()
        pub.close()

    assert len(kills) == len(KILL_AT)
    assert kills[0][0] < total  # the first kill came while alerts were still published
    assert all(delivered < total for _, delivered in kills)  # each with deliveries owed
    for r in receivers:
        assert set(r.first) == set(published)
        # a request cut short by a SIGKILL is counted as incomplete, never verified: every
        # body that arrived whole must carry a valid signature
        assert r.bad_signatures == 0
        by_call = ids_by_call(r)
        assert len(by_call) == CALLS
        for call, ids in by_call.items():
            revisions = [int(i.rsplit(".r", 1)[1]) for i in ids]
            assert revisions == list(range(1, REVISIONS + 1)), (call, revisions)
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 0
    assert client.zcard(keys.wh_dead) == 0
    assert client.scard(keys.wh_parked) == 0
