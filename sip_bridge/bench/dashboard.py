"""Dashboard live feed: publish-to-client latency and loss with N WebSocket clients.

A real redis-server and a real ``callshield dashboard`` process (uvicorn). ``--clients``
live-feed WebSocket clients (API key, as a wallboard or an integrator connects) stay
connected while the real bus publisher (``AlertPublisher``, the bridge's) publishes
alerts at ``--rate`` per second for ``--seconds``. Per alert and client: the time from
``publish_alert`` (the media path handing it over) to the client holding the decoded
message, so the figure covers the publisher's flush, Redis, the dashboard's one
``XREAD`` reader, the fan-out and the socket. Per client: alerts not received (loss)
and whether the server dropped it as too slow. While the alerts flow, one more client
times ``GET /api/v1/alerts`` (the queue view's call). The same run first does all of
this with one live client: the baseline. Goal (issue 8): p99 <= 100 ms with 50 clients,
alert to *shown in the browser's feed*.

Shown, not only received: ``--browsers`` real headless Chromium pages (an analyst
logged in through the form, on ``/alerts``) join each phase (``--browsers`` of them
beside the ``--clients`` sockets, one beside the baseline's one socket), and each notes
when every alert's row is in its DOM and the animation frame that paints it
(``sip_bridge.bench.dashboard_browser``), against the same publish times, on the same
wall clock (checked at the start and end of each phase: ``browser.clock``). The
``side_by_side`` table puts the socket and browser distributions of both phases together.

The clients run in this process's event loop: on a small machine that is part of what is
measured, though profiled (py-spy) 50 clients at 20 alerts/s take about 6 % of a core
here; the dashboard's loop, shared with the alert list it serves, is what sets the p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from detectors.alert_schema import Alert, Band, Dimension, Reason, alert_id_for
from detectors.bus.codec import decode_alert
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from sip_bridge.bench.dashboard_browser import BrowserFeed, chromium_cpu_s
from sip_bridge.bench.report import summarize

GOAL_P99_MS = 100.0
PREFIX = "bench:"
ANALYST, PASSWORD = "bench-analyst", "bench dashboard browser password"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=50, help="live-feed WebSocket clients")
    parser.add_argument("--rate", type=float, default=20.0, help="alerts published per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="publishing time per phase")
    parser.add_argument(
        "--browsers",
        type=int,
        default=3,
        help="headless Chromium pages on /alerts beside the sockets (0: sockets only)",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="4 clients, 1 browser page, 1.5 s: for tests"
    )


@dataclass
class _Client:
    latencies_ms: list[float] = field(default_factory=list)
    received: set[str] = field(default_factory=set)
    closed_by_server: int | None = None  # close code when the server dropped it


def _alert(call_id: str) -> Alert:
    now = datetime.now(UTC)
    dim = Dimension.SYNTHETIC_VOICE
    return Alert(
        alert_id=alert_id_for(call_id, dim, 0),
        revision=1,
        call_id=call_id,
        node_id="bench",
        dimension=dim,
        band=Band.HIGH,
        score=0.9,
        threshold=0.7,
        episode=0,
        reasons=(Reason(dimension=dim, start_s=1.0, end_s=5.0, score=0.9),),
        created_at=now,
        updated_at=now,
        policy_version="bench",
        provider="CPUExecutionProvider",
    )


async def _listen(ws: ClientConnection, sent: dict[str, float], out: _Client) -> None:
    try:
        async for raw in ws:
            now = time.perf_counter()
            msg = json.loads(raw)
            if msg.get("type") != "alert":
                continue
            alert_id = msg["alert"]["alert_id"]
            t0 = sent.get(alert_id)
            if t0 is not None and alert_id not in out.received:
                out.received.add(alert_id)
                out.latencies_ms.append((now - t0) * 1000)
    except ConnectionClosed as exc:
        if exc.rcvd is not None and exc.rcvd.code != 1000:
            out.closed_by_server = exc.rcvd.code


async def _wait_clients(http: httpx.AsyncClient, n: int) -> None:
    """Until the dashboard counts every client on its hub (connected is not enough)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = (await http.get("/api/v1/system")).json().get("live_feed_clients", 0)
        if found >= n:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"only {found} of {n} live-feed clients registered")


async def _to_redis_ms(redis_url: str, sent_wall: dict[str, float]) -> list[float]:
    r = redis.asyncio.Redis.from_url(redis_url)
    try:
        entries: Any = await r.xrange(f"{PREFIX}{{alerts}}")
    finally:
        await r.aclose()
    out = []
    for entry_id, fields in entries:
        alert_id = decode_alert(fields).alert_id
        if alert_id in sent_wall:
            out.append(int(entry_id.split(b"-")[0]) - sent_wall[alert_id] * 1000)
    return out


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _phase(
    base: str,
    key: str,
    pub: AlertPublisher,
    redis_url: str,
    dashboard_pid: int,
    name: str,
    clients: int,
    browsers: int,
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    ws_url = base.replace("http://", "ws://") + "/api/v1/live"
    headers = {"Authorization": f"Bearer {key}"}
    sent: dict[str, float] = {}
    sent_wall: dict[str, float] = {}  # against Redis's clock: the stream entry ids
    results = [_Client() for _ in range(clients)]
    http = httpx.AsyncClient(base_url=base, headers=headers, timeout=10)
    sockets = [
        await connect(ws_url, additional_headers=headers, max_queue=None) for _ in range(clients)
    ]
    listeners = [
        asyncio.create_task(_listen(ws, sent, out))
        for ws, out in zip(sockets, results, strict=True)
    ]
    list_ms: list[float] = []
    list_errors = 0
    feed = BrowserFeed()
    try:
        if browsers:
            await feed.start(base, ANALYST, PASSWORD, browsers)
        await _wait_clients(http, clients + browsers)
        clock_start = await feed.clock_check()

        async def alert_list() -> None:
            nonlocal list_errors
            while True:
                t0 = time.perf_counter()
                r = await http.get("/api/v1/alerts")
                list_ms.append((time.perf_counter() - t0) * 1000)
                list_errors += r.status_code != 200
                await asyncio.sleep(0.05)

        lister = asyncio.create_task(alert_list())
        cpu0 = _cpu_s(dashboard_pid)
        chrome0, bench0 = chromium_cpu_s(), time.process_time()
        total = max(1, round(rate * seconds))
        start = time.perf_counter()
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            alert = _alert(f"bench-{name}-{i:06d}")
            sent_wall[alert.alert_id] = time.time()
            sent[alert.alert_id] = time.perf_counter()
            pub.publish_alert(alert)
        took = time.perf_counter() - start
        deadline = time.monotonic() + 5.0  # late messages: drain, then count the rest lost
        while time.monotonic() < deadline and any(len(c.received) < total for c in results):
            await asyncio.sleep(0.05)
        while (
            browsers and time.monotonic() < deadline and await feed.shown_count(sent_wall) < total
        ):
            await asyncio.sleep(0.2)
        lister.cancel()
        await asyncio.gather(lister, return_exceptions=True)
        cpu1 = _cpu_s(dashboard_pid)
        chrome1, bench1 = chromium_cpu_s(), time.process_time()
        clock_end = await feed.clock_check()
        shown = await feed.collect(sent_wall)
    finally:
        for ws in sockets:
            await ws.close()
        await asyncio.gather(*listeners, return_exceptions=True)
        await http.aclose()
        await feed.close()
    lost = [total - len(c.received) for c in results]
    to_redis = await _to_redis_ms(redis_url, sent_wall)
    return {
        "clients": clients,
        "alerts_published": total,
        "publish_rate_per_s": round(total / took, 1) if took > 0 else None,
        "feed_latency": summarize([x for c in results for x in c.latencies_ms], "ms"),
        # publish -> in the Redis stream (the entry id's millisecond, same host clock):
        # the publisher's share of feed_latency; the rest is the dashboard and the socket
        "to_redis_latency": summarize(to_redis, "ms"),
        "loss": {
            "per_client_max": max(lost),
            "per_client_mean": sum(lost) / len(lost),
            "clients_with_loss": sum(1 for n in lost if n),
            "dropped_by_server": sum(1 for c in results if c.closed_by_server is not None),
        },
        "alert_list": {"latency": summarize(list_ms, "ms"), "errors": list_errors},
        # the dashboard's CPU while publishing and draining, whatever else the machine
        # runs: the fan-out's and the alert list's cost, steadier than latency on a busy box
        "dashboard_cpu_s": round(cpu1 - cpu0, 3) if cpu0 is not None and cpu1 is not None else None,
        "alert_list_requests": len(list_ms),
        # the same span's CPU of this process (the socket clients, the publisher, the
        # pages' driver) and of its Chromium processes: what the measuring itself costs
        "bench_process_cpu_s": round(bench1 - bench0, 3),
        "chromium_cpu_s": round(chrome1 - chrome0, 3)
        if chrome0 is not None and chrome1 is not None
        else None,
        "browser": {
            "pages": browsers,
            # publish -> the page's main thread handles the WebSocket message
            "received_latency": summarize(shown.recv_ms, "ms"),
            # publish -> the row in the page's DOM, cells filled
            "dom_latency": summarize(shown.dom_ms, "ms"),
            # publish -> the animation frame that paints the row: "shown"
            "shown_latency": summarize(shown.frame_ms, "ms"),
            "loss_per_page_max": max((total - n for n in shown.received), default=0),
            "clock": {"start": clock_start, "end": clock_end},
        },
    }


def _start_dashboard(env: dict[str, str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "sip_bridge.cli", "dashboard", "--listen", f"127.0.0.1:{port}"]
    with log_path.open("wb") as log:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the dashboard exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the dashboard did not start in 30 s")


def _side_by_side(phases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per phase and path: socket receipt, browser receipt, DOM, shown."""
    rows = []
    for phase, figures in phases.items():
        for path, dist in (
            ("socket_received", figures["feed_latency"]),
            ("browser_received", figures["browser"]["received_latency"]),
            ("browser_dom", figures["browser"]["dom_latency"]),
            ("browser_shown", figures["browser"]["shown_latency"]),
        ):
            rows.append(
                {"phase": phase, "path": path}
                | {k: dist.get(k) for k in ("n", "p50", "p99", "p99.9", "max")}
            )
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    clients, browsers, rate, seconds = args.clients, args.browsers, args.rate, args.seconds
    if args.tiny:
        clients, browsers, rate, seconds = 4, 1, 20.0, 1.5
    if clients < 1 or rate <= 0 or seconds <= 0 or browsers < 0:
        raise ValueError("--clients, --rate and --seconds must be positive, --browsers >= 0")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    with tempfile.TemporaryDirectory(prefix="cs-bench-dash-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "redis", port=free_port())
        server.start()
        proc = None
        pub = None
        try:
            env = {
                **os.environ,
                "CALLSHIELD_REDIS_URL": server.url,
                "CALLSHIELD_STATE_DIR": str(Path(tmp) / "state"),
                "CALLSHIELD_KEY_PREFIX": PREFIX,
                # every client connects from 127.0.0.1: lift the per-address connect limit
                "CALLSHIELD_DASHBOARD_LIVE_CONNECTS": str(10 * clients + 100),
                "CALLSHIELD_DASHBOARD_COOKIE_SECURE": "false",  # the pages use plain http
            }
            if browsers:
                subprocess.run(
                    [
                        *(sys.executable, "-m", "sip_bridge.cli", "dashboard", "create-user"),
                        *(ANALYST, "--role", "analyst", "--password-stdin"),
                    ],
                    env=env,
                    input=PASSWORD,
                    check=True,
                    capture_output=True,
                    text=True,
                )
            key = subprocess.run(
                [sys.executable, "-m", "sip_bridge.cli", "dashboard", "create-api-key", "bench"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            port = free_port()
            proc = _start_dashboard(env, port, Path(tmp) / "dashboard.log")
            bus = BusSettings.model_validate(
                {"redis_url": server.url, "state_dir": Path(tmp) / "pub", "key_prefix": PREFIX}
            )
            pub = AlertPublisher(redis.Redis.from_url(server.url), bus)
            pub.start()
            base = f"http://127.0.0.1:{port}"
            baseline = asyncio.run(
                _phase(
                    base, key, pub, server.url, proc.pid, "one", 1, min(browsers, 1), rate, seconds
                )
            )
            loaded = asyncio.run(
                _phase(
                    base, key, pub, server.url, proc.pid, "many", clients, browsers, rate, seconds
                )
            )
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
    p99 = loaded["feed_latency"].get("p99", float("nan"))
    base_p99 = baseline["feed_latency"].get("p99", float("nan"))
    shown = loaded["browser"]["shown_latency"]
    shown_p99 = shown.get("p99", float("nan"))
    browser_ok = not browsers or (
        bool(shown_p99 <= GOAL_P99_MS) and loaded["browser"]["loss_per_page_max"] == 0
    )
    return {
        "benchmark": "dashboard",
        "setup": {
            "clients": clients,
            "browser_pages": browsers,
            "baseline_browser_pages": min(browsers, 1),
            "rate_per_s": rate,
            "seconds_per_phase": seconds,
        },
        "side_by_side": _side_by_side({"baseline": baseline, "loaded": loaded}),
        "baseline_one_client": baseline,
        "clients": loaded,
        "summary": {
            "feed_p50_ms": loaded["feed_latency"].get("p50"),
            "feed_p99_ms": p99,
            "to_redis_p99_ms": loaded["to_redis_latency"].get("p99"),
            "dashboard_cpu_s": loaded["dashboard_cpu_s"],
            "baseline_feed_p99_ms": base_p99,
            "ratio_p99": round(p99 / base_p99, 2) if base_p99 else None,
            "alert_list_p99_ms": loaded["alert_list"]["latency"].get("p99"),
            "baseline_alert_list_p99_ms": baseline["alert_list"]["latency"].get("p99"),
            "max_client_loss": loaded["loss"]["per_client_max"],
            "browser_shown_p50_ms": shown.get("p50"),
            "browser_shown_p99_ms": shown.get("p99"),
            "baseline_browser_shown_p99_ms": baseline["browser"]["shown_latency"].get("p99"),
            "max_page_loss": loaded["browser"]["loss_per_page_max"],
            "goal_p99_ms": GOAL_P99_MS,
            # the goal is alert to shown in the browser; without pages, to the socket
            "goal_met": bool(p99 <= GOAL_P99_MS)
            and loaded["loss"]["per_client_max"] == 0
            and browser_ok,
        },
    }
