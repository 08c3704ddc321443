"""WHIP publishers sustained: event-loop lag, frame loss and CPU per publisher, native
jitter buffer path beside aiortc's own receiver path in the same run.

Two phases with the same publishers (count, real speech, codec, duration), each sent by
aiortc clients in a separate process (``sip_bridge.bench.webrtc_publishers``):

- ``native``: the real bridge (``sip_bridge.bridge.Bridge``: WHIP endpoint, RTP taken
  after SRTP and pushed into the native jitter buffer, the 20 ms playout clock into a
  counting sink). Frames = NORMAL frames pulled per leg.
- ``aiortc``: the same HTTP stack answering with plain aiortc, every session's
  ``RemoteStreamTrack.recv()`` consumed (aiortc's jitter buffer and decoder thread).
  Frames = frames the track yielded. Its jitter buffer holds back its last 4 frames
  (prefetch), which shows as 4 lost frames per publisher at the end.

Event-loop lag is sampled every 10 ms on the server's loop (how late a 10 ms sleep
wakes) while every publisher is connected and sending; CPU is the server process's
(user + system) over that window, per publisher, in % of one core. Frame loss is
1 - frames / frames the publishers sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from sip_bridge.bench.report import summarize

SAMPLE_S = 0.010


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--publishers", type=int, default=8, help="concurrent WHIP publishers")
    parser.add_argument("--seconds", type=float, default=20.0, help="sustained for this long")
    parser.add_argument(
        "--codec",
        default="",
        help="opus, PCMU or PCMA (default: opus when the native jitter buffer decodes it)",
    )
    parser.add_argument("--speech-dir", type=Path, help="8 kHz 16-bit mono WAV files")
    parser.add_argument("--tiny", action="store_true", help="2 publishers, 3 s (smoke tests)")


class LagSampler:
    """On the measured loop: how late each 10 ms sleep wakes (ms), while ``recording``."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.recording = False
        self.stopped = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopped:
            t = loop.time()
            await asyncio.sleep(SAMPLE_S)
            if self.recording:
                self.samples.append((loop.time() - t - SAMPLE_S) * 1000)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sip_bridge.adapters.webrtc_seam import native_audio_codecs

    publishers, seconds = int(args.publishers), float(args.seconds)
    if args.tiny:
        publishers, seconds = 2, 3.0
    codec = args.codec or ("opus" if "opus" in native_audio_codecs() else "PCMU")
    job = {
        "publishers": publishers,
        "seconds": seconds,
        "codec": codec,
        "speech_dir": str(args.speech_dir) if args.speech_dir else None,
    }
    native = _native_phase(job)
    baseline = _aiortc_phase(job)
    return {
        "benchmark": "webrtc",
        "config": {
            **{k: v for k, v in job.items() if k != "speech_dir"},
            "ptime_ms": 20,
            "loop_lag_sample_ms": SAMPLE_S * 1000,
            "publishers_process": "separate (aiortc clients, real speech)",
        },
        "native": native,
        "aiortc": baseline,
        "ratio_native_over_aiortc": _ratios(native, baseline),
    }


def _ratios(native: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, float | None] = {}
    for p in ("p50", "p99", "p99.9"):
        out[f"loop_lag_{p}"] = ratio(native["loop_lag_ms"].get(p), base["loop_lag_ms"].get(p))
    out["cpu_per_publisher"] = ratio(native["cpu_per_publisher_pct"], base["cpu_per_publisher_pct"])
    out["frame_loss"] = ratio(native["frame_loss"], base["frame_loss"])
    return out


# ---- phases ----------------------------------------------------------------------------


def _native_phase(job: dict[str, Any]) -> dict[str, Any]:
    from sip_bridge.bridge import Bridge
    from sip_bridge.calls import MemoryPublisher
    from sip_bridge.settings import Settings
    from sip_bridge.sinks import CountingSink

    token = secrets.token_urlsafe(16)
    settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "api_listen": "127.0.0.1:0",
            "drain_timeout_s": 2.0,
            "whip_token": token,
            "whip_codecs": job["codec"],
            "whip_ice_addresses": "127.0.0.1",
        }
    )
    sink, events = CountingSink(), MemoryPublisher()
    bridge = Bridge(settings, sink=sink, publisher=events)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(bridge.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not bridge.ready.is_set():
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the bridge did not start")
        time.sleep(0.01)
    try:
        assert bridge.api is not None
        host, port = bridge.api.address
        late0 = bridge.media.late_ticks
        result = _drive(loop, f"http://{host}:{port}/v1/whip", token, job)
        legs = [leg_id for e, c in events.events if e.event == "started" for leg_id in c.legs]
        normal = [sink.counts(leg).get("normal", 0) for leg in legs]
        result["frames"] = sum(normal)
        result["frames_per_leg"] = summarize(normal, unit="frames")
        result["playout_late_ticks"] = bridge.media.late_ticks - late0
        result["calls_ended"] = sum(1 for e, _ in events.events if e.event == "ended")
    finally:
        loop.call_soon_threadsafe(bridge.request_stop)
        thread.join(timeout=30)
    return _finish(result)


def _aiortc_phase(job: dict[str, Any]) -> dict[str, Any]:
    from sip_bridge.api_server import ApiServer
    from sip_bridge.bench.webrtc_baseline import AiortcWhipServer

    server = AiortcWhipServer(job["codec"], ("127.0.0.1",))
    api = ApiServer(server.app, "127.0.0.1", 0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    on_loop: Callable[[Any], Future[Any]] = lambda c: asyncio.run_coroutine_threadsafe(c, loop)  # noqa: E731
    try:
        on_loop(api.start()).result(timeout=15)
        host, port = api.address
        result = _drive(loop, f"http://{host}:{port}/v1/whip", "unused", job)
        result["frames"] = server.frames
    finally:
        on_loop(server.close()).result(timeout=15)
        on_loop(api.close()).result(timeout=15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=15)
        loop.close()
    return _finish(result)


def _finish(result: dict[str, Any]) -> dict[str, Any]:
    sent = sum(result["publisher"]["frames_sent"])
    result["frames_expected"] = sent
    result["frame_loss"] = max(0.0, 1 - result["frames"] / sent) if sent else None
    return result


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _drive(
    loop: asyncio.AbstractEventLoop, endpoint: str, token: str, job: dict[str, Any]
) -> dict[str, Any]:
    """Run the publishers' process against ``endpoint``; sample the loop's lag and this
    process's CPU while they are all connected and sending."""
    sampler = LagSampler()
    sampling = asyncio.run_coroutine_threadsafe(sampler.run(), loop)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sip_bridge.bench.webrtc_publishers"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({**job, "endpoint": endpoint, "token": token}) + "\n")
    proc.stdin.flush()
    timer = threading.Timer(float(job["seconds"]) + 90, proc.kill)
    timer.start()
    ready: dict[str, Any] = {}
    pub: dict[str, Any] = {}
    cpu0 = cpu1 = t0 = t1 = 0.0
    try:
        for line in proc.stdout:
            msg = json.loads(line)
            if "ready" in msg:
                ready, cpu0, t0 = msg, _cpu_s(), time.monotonic()
                sampler.recording = True
            elif "stopped" in msg:
                sampler.recording = False
                cpu1, t1 = _cpu_s(), time.monotonic()
            elif "result" in msg:
                pub = msg["result"]
        proc.wait()
    finally:
        timer.cancel()
        sampler.stopped = True
        sampling.result(timeout=5)
    if proc.returncode != 0 or not pub:
        raise SystemExit(f"the publishers failed (exit {proc.returncode})")
    connected = int(ready.get("ready", 0))
    window = max(t1 - t0, 1e-9)
    return {
        "publishers_connected": connected,
        "refused": ready.get("refused", {}),
        "window_s": window,
        "setup_ms": summarize(pub["setup_ms"], unit="ms"),
        "loop_lag_ms": summarize(sampler.samples, unit="ms"),
        "cpu_per_publisher_pct": 100 * (cpu1 - cpu0) / window / connected if connected else None,
        "publisher_process_cpu_per_publisher_pct": (
            100 * pub["cpu_s"] / window / connected if connected else None
        ),
        "publisher": {
            "frames_sent": pub["frames_sent"],
            "deleted_ok": pub["deleted_ok"],
        },
    }
