"""Alert latency: audio in -> alert out through the real bridge, N calls beside one.

A real bridge in this process (its full wiring: native jitter buffer, detector runtime
with the dev fixture models, fusion under the built-in policy, the Redis publisher) and
its own redis-server. Calls come through the control API, each one external leg of real
speech as µ-law RTP paced every 20 ms; the synthetic-voice fixture's marker tone starts
``--lead-s`` into the call (spread over a second between calls). The latency is the time
Redis stamped on the alert's first revision (its stream entry id, the server's clock)
minus the wall-clock time at which the first marked packet was sent (loopback: its
arrival). Rounds of ``--calls`` concurrent calls alternate with rounds of one call
alone (the same-run baseline). A call whose marker raised no alert is counted, not
sampled. Also measured: how long a policy stored in Redis takes to be in force on the
bridge (``--policy-changes`` changes, while no call runs).

What it includes: the window the marker must fill (fixture window and hop), the N-of-M
rule (2 of 3 windows), scheduling, inference, fusion and the XADD.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import redis
import redis.asyncio

from detectors.alert_schema import Alert, Dimension
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.policy import PolicyBody
from detectors.bus.policy_store import PolicyStore
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.bench.api_calls import ApiCall, BridgeHost, bridge_settings, marked
from sip_bridge.bench.report import summarize
from sip_bridge.demo import find_speech, leg_audio
from sip_bridge.wiring import Wiring

TOKEN = "bench-alert-latency"
PREFIX = "bench:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=8, help="concurrent calls per load round")
    parser.add_argument("--rounds", type=int, default=3, help="load rounds (and baseline rounds)")
    parser.add_argument("--lead-s", type=float, default=2.0, help="genuine speech before marker")
    parser.add_argument("--marker-s", type=float, help="marked speech per call (default per model)")
    parser.add_argument("--policy-changes", type=int, default=20)
    parser.add_argument("--tiny", action="store_true", help="tiny fixtures, 2 calls, 1 round")
    parser.add_argument("--speech-dir", type=Path)


def _round(
    host: BridgeHost, audio: list[npt.NDArray[np.int16]], onsets: list[float]
) -> list[ApiCall]:
    calls = [ApiCall(host.api_url, TOKEN, a, o) for a, o in zip(audio, onsets, strict=True)]
    for c in calls:
        c.start()
    for c in calls:
        c.wait()
        c.end()
    return calls


def _latencies(client: redis.Redis, keys: Keys, calls: list[ApiCall]) -> tuple[list[float], int]:
    """Alert first revision's Redis time minus onset, in ms, per call; and the misses."""
    first: dict[str, int] = {}
    entries: Any = client.xrange(keys.alerts)
    for entry_id, fields in entries:
        msg = decode(fields)
        sv = isinstance(msg, Alert) and msg.dimension is Dimension.SYNTHETIC_VOICE
        if sv and isinstance(msg, Alert) and msg.revision == 1:
            text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            first.setdefault(msg.call_id, int(text.split("-")[0]))
    out, missed = [], 0
    for c in calls:
        ms = first.get(c.call_id)
        if ms is None or c.onset_wall is None:
            missed += 1
            continue
        out.append(ms - c.onset_wall * 1000.0)
    return out, missed


def _policy_reach(url: str, keys: Keys, wiring: Wiring, changes: int) -> list[float]:
    """Stored -> in force on the bridge, ms, for ``changes`` alternating policies."""

    async def go() -> list[float]:
        r = redis.asyncio.Redis.from_url(url)
        store, out = PolicyStore(r, keys), []
        try:
            for i in range(changes):
                threshold = 0.5 + 0.01 * (i % 2)
                body = PolicyBody.model_validate(
                    {"dimensions": {"synthetic_voice": {"threshold": threshold}}}
                )
                policy = await store.apply(body)
                t0 = time.perf_counter()
                while wiring.runtime.policy.version != policy.version:
                    if time.perf_counter() - t0 > 10:
                        raise TimeoutError("a stored policy did not reach the bridge in 10 s")
                    await asyncio.sleep(0.001)
                out.append((time.perf_counter() - t0) * 1000.0)
                await asyncio.sleep(random.uniform(0.0, 0.3))  # not in step with the poll
        finally:
            await r.aclose()
        return out

    return asyncio.run(go())


def run(args: argparse.Namespace) -> dict[str, Any]:
    calls_n, rounds, changes = args.calls, args.rounds, args.policy_changes
    models = "tiny" if args.tiny else "full"
    marker_s = args.marker_s or (3.0 if args.tiny else 10.0)
    lead_s = args.lead_s
    if args.tiny:
        calls_n, rounds, changes, lead_s = 2, 1, 5, 1.0
    logging.getLogger("sip_bridge").setLevel(logging.WARNING)
    logging.getLogger("detectors").setLevel(logging.WARNING)
    files = find_speech(args.speech_dir)
    seconds = lead_s + 1.0 + marker_s
    with tempfile.TemporaryDirectory(prefix="cs-bench-alert-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "redis", port=free_port())
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            bus = BusSettings.model_validate(
                {"redis_url": server.url, "state_dir": Path(tmp) / "state", "key_prefix": PREFIX}
            )
            rtp = random.randrange(20000, 50000, 400)
            wiring = Wiring(
                bridge_settings(rtp, TOKEN, models, max_analysed_calls=max(64, calls_n)),
                bus,
                ModelSettings(models_dir=Path(tmp) / "no-models"),
            )
            host = BridgeHost(wiring.settings, wiring)
            host.start()
            keys = Keys(PREFIX)
            base_calls: list[ApiCall] = []
            load_calls: list[ApiCall] = []
            try:
                for r in range(rounds):
                    audio = leg_audio(files, r, seconds)
                    base_calls += _round(host, [marked(audio, lead_s)], [lead_s])
                    onsets = [lead_s + (i % 10) / 10.0 for i in range(calls_n)]
                    load_audio = [
                        marked(leg_audio(files, r * calls_n + i, seconds), onsets[i])
                        for i in range(calls_n)
                    ]
                    load_calls += _round(host, load_audio, onsets)
                reach = _policy_reach(server.url, keys, wiring, changes)
                time.sleep(0.5)  # the publisher flushes
                base, base_missed = _latencies(client, keys, base_calls)
                load, load_missed = _latencies(client, keys, load_calls)
            finally:
                host.stop()
        finally:
            client.close()
            server.stop()
    load_s, base_s = summarize(load, "ms"), summarize(base, "ms")
    p50, base_p50 = load_s.get("p50"), base_s.get("p50")
    return {
        "benchmark": "alert-latency",
        "setup": {
            "models": f"dev fixtures ({models})",
            "policy": "built-in (synthetic_voice: 2 of 3 windows >= 0.5)",
            "concurrent_calls": calls_n,
            "rounds": rounds,
            "lead_s": lead_s,
            "marker_s": marker_s,
            "measured": "Redis stream time of the alert's first revision - send time of "
            "the first marked RTP packet",
        },
        "load": {"latency": load_s, "calls": len(load_calls), "no_alert": load_missed},
        "baseline_single_call": {
            "latency": base_s,
            "calls": len(base_calls),
            "no_alert": base_missed,
        },
        "policy_reload_reach": summarize(reach, "ms"),
        "summary": {
            "load_p50_ms": p50,
            "load_p99_ms": load_s.get("p99"),
            "load_p99.9_ms": load_s.get("p99.9"),  # only from 1,000 samples on
            "baseline_p50_ms": base_p50,
            "ratio_p50": round(p50 / base_p50, 2) if p50 and base_p50 else None,
            "policy_reach_max_ms": max(reach) if reach else None,
        },
    }
