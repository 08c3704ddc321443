"""Alert webhooks: publish-to-receiver latency through Redis and ``callshield webhooks run``.

A real redis-server (AOF), a real ``callshield webhooks run`` process and ``--endpoints``
real HTTP receivers on 127.0.0.1 (threads of this process), registered as endpoints:
``fast`` ones answer at once, ``slow`` ones take ``--slow-ms`` per request, ``flaky`` ones
answer 503 to ``--fail-rate`` of requests (the dispatcher retries: real-time lane, 1 s,
2 s, 4 s). Every receiver verifies the Standard Webhooks signature (``standardwebhooks``)
and deduplicates by ``webhook-id``. The real bus publisher (``AlertPublisher``: in-memory
hand-off, the SQLite outbox fsynced per batch, the Lua XADD) publishes alert revisions
at ``--rate`` per second for ``--seconds`` (two revisions per call, in order). Per alert
and endpoint: the time from ``publish_alert`` to the receiver holding the verified
payload; per endpoint: lost, duplicates, per-call order, attempts and retries from the
dispatcher's own attempt log (``wh:log``).

Phases, one run: the baseline (the floor: this process signs the same envelope and
POSTs it straight to a fast receiver, no Redis and no dispatcher, at the same rate); the
dispatcher at that rate; then the same with Redis killed (SIGKILL) and restarted half
way, where what counts is that nothing is lost.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import redis
from cryptography.fernet import Fernet
from standardwebhooks import Webhook, WebhookVerificationError

from detectors.alert_schema import Alert, Band, Dimension, Reason, alert_id_for, event_id
from detectors.bus.keys import Keys
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.payload import envelope_json
from detectors.bus.webhooks.secrets import new_secret
from detectors.bus.webhooks.sender import signature_header
from detectors.bus.webhooks.store import EndpointStore
from sip_bridge.bench.report import summarize

PREFIX = "bench:"
KINDS = ("fast", "slow", "flaky")
DRAIN_S = 20.0  # after the last publish: the flaky endpoints' retries need up to 7 s
# What a Redis kill -9 can cost the dispatcher: its last second of writes (AOF everysec:
# an XACK, a claim, a finished delivery). It finds its way back through the intake's
# take-over (unacknowledged entries first) and the claim lease, shorter than the default
# (45 s) so the restart phase can wait it out. A send must stay within the lease.
DISPATCHER = {
    "webhook_claim_idle_ms": 5000,
    "webhook_claim_lease_s": 8.0,
    "webhook_durable_timeout_s": 5.0,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoints", type=int, default=4, help="receivers (fast/slow/flaky)")
    parser.add_argument("--rate", type=float, default=25.0, help="alert revisions per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="publishing time per phase")
    parser.add_argument("--slow-ms", type=float, default=200.0, help="a slow receiver's delay")
    parser.add_argument("--fail-rate", type=float, default=0.2, help="a flaky receiver's 503s")
    parser.add_argument(
        "--no-redis-restart", action="store_true", help="skip the Redis kill -9 phase"
    )
    parser.add_argument("--tiny", action="store_true", help="3 endpoints, 1.5 s: for tests")


class _Sink:
    """One receiver: verify, dedupe by webhook-id, note when each id first arrived."""

    def __init__(self, kind: str, delay_s: float, fail_rate: float, seed: int) -> None:
        self.kind = kind
        self.endpoint_id = ""
        self.secret = ""
        self.delay_s = delay_s
        self.fail_rate = fail_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.first: dict[str, float] = {}  # webhook-id -> perf_counter at first arrival
        self.order: dict[str, list[int]] = {}  # call -> revisions in order of arrival
        self.requests = 0
        self.refused = 0  # answered 503 on purpose
        self.bad_signatures = 0
        self.duplicates = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                code = sink.handle(body, dict(self.headers.items()))
                if code == 204 and sink.delay_s:
                    time.sleep(sink.delay_s)  # a slow integration (after taking it)
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/callshield"

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        with self._lock:
            self.requests += 1
            if self.fail_rate and self._rng.random() < self.fail_rate:
                self.refused += 1
                return 503
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            with self._lock:
                self.bad_signatures += 1
            return 401
        now = time.perf_counter()
        msg_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        with self._lock:
            if msg_id in self.first:
                self.duplicates += 1
            else:
                self.first[msg_id] = now
                data = payload["data"]
                self.order.setdefault(data["call_id"], []).append(int(data["revision"]))
        return 204

    def order_violations(self) -> int:
        return sum(1 for revs in self.order.values() if revs != sorted(revs))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _alerts(phase: str, total: int) -> list[Alert]:
    """Two revisions per call, back to back (an alert, then its escalation)."""
    dim = Dimension.SYNTHETIC_VOICE
    out = []
    for i in range(total):
        call_id = f"bench-{phase}-{i // 2:06d}"
        revision = i % 2 + 1
        now = datetime.now(UTC)
        out.append(
            Alert(
                alert_id=alert_id_for(call_id, dim, 0),
                revision=revision,
                call_id=call_id,
                node_id="bench",
                dimension=dim,
                band=Band.HIGH if revision > 1 else Band.ELEVATED,
                score=0.9,
                threshold=0.7,
                episode=0,
                reasons=(Reason(dimension=dim, start_s=1.0, end_s=5.0, score=0.9),),
                created_at=now,
                updated_at=now,
                policy_version="bench",
                provider="CPUExecutionProvider",
                external_ids={"asterisk": f"1700000000.{i // 2}"},
            )
        )
    return out


def _paced(
    alerts: list[Alert], rate: float, send: Callable[[Alert], None], mid: Callable[[], None]
) -> tuple[dict[str, float], float]:
    """Hand each alert to ``send`` on schedule; ``mid`` once half way. Returns the
    hand-off time per webhook-id and the publishing time."""
    sent: dict[str, float] = {}
    start = time.perf_counter()
    for i, alert in enumerate(alerts):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if i == len(alerts) // 2:
            mid()
        sent[event_id(alert)] = time.perf_counter()
        send(alert)
    return sent, time.perf_counter() - start


def _drain(sinks: list[_Sink], ids: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(ids <= set(s.first) for s in sinks):
            return
        time.sleep(0.05)


def _latencies(sink: _Sink, sent: dict[str, float]) -> list[float]:
    return [(sink.first[i] - t0) * 1000 for i, t0 in sent.items() if i in sink.first]


def _baseline(alerts: list[Alert], rate: float, sink: _Sink) -> dict[str, Any]:
    """The floor: sign and POST the envelope the dispatcher would send, directly."""
    http = httpx.Client(trust_env=False, timeout=5)

    def post(alert: Alert) -> None:
        body = envelope_json(alert, False)
        msg_id = event_id(alert)
        now = datetime.now(UTC)
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature_header([sink.secret], msg_id, now, body),
            "content-type": "application/json",
        }
        http.post(sink.url, content=body.encode(), headers=headers)

    try:
        sent, took = _paced(alerts, rate, post, lambda: None)
    finally:
        http.close()
    _drain([sink], set(sent), 5.0)
    return {
        "alerts": len(sent),
        "publish_rate_per_s": round(len(sent) / took, 1),
        "latency": summarize(_latencies(sink, sent), "ms"),
        "lost": len(set(sent) - set(sink.first)),
    }


def _attempts(client: redis.Redis, keys: Keys, since: str) -> dict[str, tuple[int, int]]:
    """Per endpoint id: (attempts, failed attempts) in the dispatcher's log after ``since``."""
    out: dict[str, tuple[int, int]] = {}
    rows: Any = client.xrange(keys.wh_log, min=f"({since}", count=10_000_000)
    for _, f in rows:
        ep = f[b"endpoint"].decode()
        ok = 200 <= int(f[b"status"]) < 300
        n, failed = out.get(ep, (0, 0))
        out[ep] = (n + 1, failed + (not ok))
    return out


def _logged(
    client: redis.Redis, keys: Keys, since: str, sinks: list[_Sink], ids: set[str]
) -> dict[str, tuple[int, int]]:
    """The attempt log once it holds every delivery the receivers saw: a receiver notes
    an alert on arrival, the dispatcher logs the attempt once the answer is back (a slow
    receiver answers ``--slow-ms`` later), so reading it the moment the drain ends would
    miss the last ones."""
    deadline = time.monotonic() + 5.0
    while True:
        got = _attempts(client, keys, since)
        if all(got.get(s.endpoint_id, (0, 0))[0] >= len(ids & set(s.first)) for s in sinks):
            return got
        if time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _owed(
    client: redis.Redis, keys: Keys, endpoint_id: str, ids: set[str], backlog: bool
) -> dict[str, int]:
    """Not delivered by the end of the drain: still queued (in the delivery queues, or
    in the stream not yet taken in while the group has a ``backlog``), dead-lettered,
    or lost (no delivery record and nothing left in the stream for the dispatcher)."""
    out = {"queued": 0, "dead": 0, "lost": 0}
    for i in ids:
        status: Any = client.hget(keys.wh_delivery(endpoint_id, i), "status")
        found = status.decode() if status else ""
        if found == "pending" or (not found and backlog):
            out["queued"] += 1
        else:
            out["dead" if found == "dead" else "lost"] += 1
    return out


def _backlog(client: redis.Redis, keys: Keys) -> bool:
    """Entries of the alert stream the webhook group has not read or not acknowledged."""
    groups: Any = client.xinfo_groups(keys.alerts)
    for g in groups:
        if g["name"] in (b"webhooks", "webhooks"):
            return bool(g.get("pending") or g.get("lag"))
    return True


def _last_log_id(client: redis.Redis, keys: Keys) -> str:
    last: Any = client.xrevrange(keys.wh_log, count=1)
    return last[0][0].decode() if last else "0-0"


def _dispatched(
    name: str,
    alerts: list[Alert],
    rate: float,
    sinks: list[_Sink],
    pub: AlertPublisher,
    acked: dict[str, float],
    client: redis.Redis,
    keys: Keys,
    mid: Callable[[], None],
) -> dict[str, Any]:
    for s in sinks:
        s.first.clear()
        s.order.clear()
        s.requests = s.refused = s.duplicates = s.bad_signatures = 0
    since = _last_log_id(client, keys)
    acked.clear()
    sent, took = _paced(alerts, rate, pub.publish_alert, mid)
    pub.flush(30.0)
    _drain(sinks, set(sent), DRAIN_S)
    attempts = _logged(client, keys, since, sinks, set(sent))
    last_arrival = max((max(s.first.values(), default=0.0) for s in sinks), default=0.0)
    first_sent = min(sent.values())
    backlog = _backlog(client, keys)
    endpoints: list[dict[str, Any]] = []
    for s in sinks:
        n, failed = attempts.get(s.endpoint_id, (0, 0))
        owed = _owed(client, keys, s.endpoint_id, set(sent) - set(s.first), backlog)
        endpoints.append(
            {
                "kind": s.kind,
                "latency": summarize(_latencies(s, sent), "ms"),
                "delivered": len(set(sent) & set(s.first)),
                "queued": owed["queued"],  # not yet delivered (e.g. in the durable lane)
                "dead": owed["dead"],
                "lost": owed["lost"],
                "duplicates": s.duplicates,
                "order_violations": s.order_violations(),
                "bad_signatures": s.bad_signatures,
                "attempts": n,
                "retries": n - len(set(sent) & set(s.first)),
                "failed_attempts": failed,
            }
        )
    delivered = sum(e["delivered"] for e in endpoints)
    by_kind = {
        kind: summarize([x for s in sinks if s.kind == kind for x in _latencies(s, sent)], "ms")
        for kind in KINDS
        if any(s.kind == kind for s in sinks)
    }
    return {
        "phase": name,
        "alerts_published": len(sent),
        "publish_rate_per_s": round(len(sent) / took, 1),
        # the first leg alone: publish_alert -> the entry acknowledged by Redis
        "publish_to_redis": summarize(
            [(acked[i] - t0) * 1000 for i, t0 in sent.items() if i in acked], "ms"
        ),
        "deliveries": delivered,
        "throughput_deliveries_per_s": round(delivered / (last_arrival - first_sent), 1)
        if last_arrival > first_sent
        else None,
        "latency_by_kind": by_kind,
        "lost": sum(e["lost"] for e in endpoints),
        "queued": sum(e["queued"] for e in endpoints),
        "dead": sum(e["dead"] for e in endpoints),
        "retries": sum(e["retries"] for e in endpoints),
        "duplicates": sum(e["duplicates"] for e in endpoints),
        "order_violations": sum(e["order_violations"] for e in endpoints),
        "dead_letters": client.zcard(keys.wh_dead),
        "endpoints": endpoints,
    }


def _start_dispatcher(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(
            [sys.executable, "-m", "sip_bridge.cli", "webhooks", "run"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    time.sleep(0.5)
    if proc.poll() is not None:
        raise RuntimeError(f"the dispatcher exited: {log.read_text()[-2000:]}")
    return proc


def run(args: argparse.Namespace) -> dict[str, Any]:
    n_endpoints, rate, seconds = args.endpoints, args.rate, args.seconds
    if args.tiny:
        n_endpoints, rate, seconds = 3, 40.0, 1.5
    if n_endpoints < 1 or rate <= 0 or seconds <= 0 or not 0 <= args.fail_rate < 1:
        raise ValueError("--endpoints, --rate, --seconds positive; --fail-rate in [0, 1)")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    total = max(2, round(rate * seconds))
    key = Fernet.generate_key()
    sinks = [
        _Sink(
            KINDS[i % 3],
            args.slow_ms / 1000 if KINDS[i % 3] == "slow" else 0.0,
            args.fail_rate if KINDS[i % 3] == "flaky" else 0.0,
            seed=i,
        )
        for i in range(n_endpoints)
    ]
    floor = _Sink("fast", 0.0, 0.0, seed=99)
    floor.secret = new_secret()
    with tempfile.TemporaryDirectory(prefix="cs-bench-alerts-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "redis", port=free_port())
        server.start()
        proc: subprocess.Popen[bytes] | None = None
        pub: AlertPublisher | None = None
        log = Path(tmp) / "dispatcher.log"
        try:
            bus = BusSettings.model_validate(
                {
                    "redis_url": server.url,
                    "state_dir": Path(tmp) / "pub",
                    "key_prefix": PREFIX,
                    "webhook_allow_private_targets": True,
                }
            )
            client = redis.Redis.from_url(server.url)
            keys = Keys(PREFIX)
            store = EndpointStore(client, keys, Fernet(key), True)
            for s in sinks:
                ep, s.secret = store.add(s.url, ("call.alert.*",), allow_private=True)
                s.endpoint_id = ep.id
            env = {
                **os.environ,
                "CALLSHIELD_REDIS_URL": server.url,
                "CALLSHIELD_STATE_DIR": str(Path(tmp) / "dispatcher"),
                "CALLSHIELD_KEY_PREFIX": PREFIX,
                "CALLSHIELD_WEBHOOK_KEY": key.decode(),
                "CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
                **{f"CALLSHIELD_{k.upper()}": str(v) for k, v in DISPATCHER.items()},
            }
            proc = _start_dispatcher(env, log)
            baseline = _baseline(_alerts("floor", total), rate, floor)
            acked: dict[str, float] = {}

            def on_acked(alert_id: str, revision: int, _entry: str) -> None:
                acked.setdefault(f"{alert_id}.r{revision}", time.perf_counter())

            pub = AlertPublisher(
                redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=0.5),
                bus,
                on_alert_acked=on_acked,
            )
            pub.start()
            steady = _dispatched(
                "steady",
                _alerts("steady", total),
                rate,
                sinks,
                pub,
                acked,
                client,
                keys,
                lambda: None,
            )
            restart = None
            if not args.no_redis_restart:

                def kill_and_restart() -> None:
                    server.kill9()
                    server.start()

                restart = _dispatched(
                    "redis_restart",
                    _alerts("restart", total),
                    rate,
                    sinks,
                    pub,
                    acked,
                    client,
                    keys,
                    kill_and_restart,
                )
            if proc.poll() is not None:
                raise RuntimeError(f"the dispatcher died: {log.read_text()[-2000:]}")
        finally:
            if pub is not None:
                pub.close()
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            server.stop()
            for s in [*sinks, floor]:
                s.close()
    fast = steady["latency_by_kind"].get("fast", {})
    floor_lat = baseline["latency"]
    return {
        "benchmark": "alerts",
        "setup": {
            "endpoints": {k: sum(1 for s in sinks if s.kind == k) for k in KINDS},
            "rate_per_s": rate,
            "seconds_per_phase": seconds,
            "slow_ms": args.slow_ms,
            "fail_rate": args.fail_rate,
            "dispatcher_settings": DISPATCHER,
        },
        "baseline_direct_post": baseline,
        "dispatcher": steady,
        "redis_restart": restart,
        "summary": {
            "fast_p50_ms": fast.get("p50"),
            "fast_p99_ms": fast.get("p99"),
            "fast_p99.9_ms": fast.get("p99.9"),
            "baseline_p50_ms": floor_lat.get("p50"),
            "baseline_p99_ms": floor_lat.get("p99"),
            "ratio_p99": round(fast["p99"] / floor_lat["p99"], 1)
            if fast.get("p99") and floor_lat.get("p99")
            else None,
            "throughput_deliveries_per_s": steady["throughput_deliveries_per_s"],
            "retries": steady["retries"],
            "lost": steady["lost"] + (restart["lost"] if restart else 0),
            "lost_across_redis_restart": restart["lost"] if restart else None,
        },
    }
