"""``callshield demo``: the whole product on this machine, and calls into it.

Startup: models checked (and derived where that takes seconds), then redis-server, the
bridge, the dashboard (with an admin login for this run) and the webhook dispatcher
(delivering to a local receiver) as child processes; a watch-listed voice is enrolled
through the dashboard's API; then calls go into the bridge over SIP/RTP on 127.0.0.1
and each alert is printed as it lands in Redis. Ctrl-C (or SIGTERM) stops the calls
(BYE), the children and removes the temporary directory; a second Ctrl-C forces.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from detectors.model_store import ModelSettings
from sip_bridge.demo import models, show, voices
from sip_bridge.demo.calls import SipCall
from sip_bridge.demo.services import ADMIN, Services


class Stop:
    """First SIGINT/SIGTERM: stop gracefully; the second: force."""

    def __init__(self, event: threading.Event, force: threading.Event) -> None:
        self.event, self.force = event, force
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on)

    def _on(self, *_: object) -> None:
        if self.event.is_set():
            self.force.set()
            print("\nforcing: killing the services", flush=True)
            return
        self.event.set()
        print("\nstopping: calls end by BYE, then the services (Ctrl-C again forces)", flush=True)


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    models_dir: Path = args.models_dir or ModelSettings().models_dir
    speech = voices.find_corpus(args.speech_dir)
    print("CallShield demo: the bridge, detectors, dashboard and webhooks on this machine")
    print(f"speech: {speech.root if speech else 'none found'}")
    svc = Services(models_dir)
    stop = Stop(svc.stopping, svc.forcing)
    try:
        state = models.ensure(models_dir, speech.root if speech else None, svc.cli)
        prep_s = time.monotonic() - t0
        if stop.event.is_set():
            return 0
        _say_models(state)
        return _run(args, svc, speech, state, stop, t0, prep_s)
    except (RuntimeError, TimeoutError, OSError) as exc:
        if stop.event.is_set():
            return 0  # a step cut short by Ctrl-C
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        svc.stop()
        print("stopped: calls ended, children stopped, temporary files removed", flush=True)


def _run(
    args: argparse.Namespace,
    svc: Services,
    speech: voices.Speech | None,
    state: models.ModelState,
    stop: Stop,
    t0: float,
    prep_s: float,
) -> int:
    svc.start_redis()
    bridge, dash = svc.start_bridge(), svc.start_dashboard()
    pool = ThreadPoolExecutor(4)
    planned = pool.submit(voices.plan_calls, speech, args.seconds)
    admin = pool.submit(svc.create_admin)
    key = pool.submit(svc.analyst_key)
    watcher_names: dict[str, str] = {}
    watcher = show.AlertWatcher(svc.redis_url, watcher_names)
    hooks = pool.submit(svc.start_webhooks, watcher.on_webhook)
    svc.wait_http(svc.dashboard_url + "/login", dash, 60)
    admin.result()
    enrolled = _enrol(svc, speech, state, key.result())
    svc.bridge_ready(bridge, 60)
    hooks.result()
    plans, notes = planned.result()
    pool.shutdown()
    if stop.event.is_set():
        return 0
    print()
    print(f"dashboard: {svc.dashboard_url}   login: {ADMIN}   password: {svc.password}")
    print(f"bridge:    sip:127.0.0.1:{svc.bridge_sip_port} (UDP/TCP)   metrics {svc.bridge_http}")
    print(f"redis:     {svc.redis_url} (no persistence)   temporary files: {svc.root}")
    for note in [*notes, *([] if enrolled else ["watch-listed call: voice not enrolled"])]:
        print(f"note: {note}")
    calls = [SipCall(p, svc.bridge_sip_port) for p in plans if enrolled or p.kind != "watchlist"]
    watcher_names.update({c.session_id: c.plan.name for c in calls})
    watcher.start()
    call_stop = threading.Event()
    for call in calls:
        call.start(call_stop)
    setup_s = time.monotonic() - t0
    print(
        f"setup: {setup_s:.1f} s from start to the first call placed"
        + (f" ({prep_s:.1f} s of it deriving models once)" if state.derived else "")
    )
    print(
        f"{len(calls)} calls of ~{args.seconds:.0f} s placed over SIP/RTP; alerts as they arrive:"
    )
    for call in calls:
        print(f"  call {call.plan.name:14} {call.plan.kind:18} {call.plan.source}")
    _wait_calls(calls, stop, args.seconds + 15)
    call_stop.set()
    for call in calls:
        call.join(5)
    stop.event.wait(args.settle)  # late alerts (the replay match, the call's last windows)
    with watcher.lock:
        print(
            show.summary(watcher.seen, [(c.plan.name, c.plan.kind, c.plan.source) for c in calls])
        )
    if not args.once and not stop.event.is_set():
        left = None if args.duration is None else max(0.0, args.duration - (time.monotonic() - t0))
        print(f"\nthe dashboard stays up at {svc.dashboard_url} - Ctrl-C to stop", flush=True)
        stop.event.wait(left)
    watcher.close()
    return 0


def _say_models(state: models.ModelState) -> None:
    for made in state.derived:
        print(f"  derived {made}; later runs reuse it")
    for problem in state.problems:
        print(f"  could not derive {problem}")
    if state.synthetic:
        print(f"models: synthetic voice {', '.join(state.synthetic)}")
    else:
        print(
            "models: no synthetic-voice model installed, so the synthetic calls will NOT be "
            "flagged (`callshield models train-synthetic` trains one, ~1 h on 2 cores)"
        )
    speaker = (
        "speaker model + cohort" if state.speaker and state.cohort else "no speaker biometrics"
    )
    print(f"models: {speaker}; replay fingerprints; Silero VAD {'on' if state.vad else 'off'}")
    print(
        "caller ID: the bridge verifies STIR/SHAKEN (the verdict is in the call's events) and "
        "the caller_id detector turns a failed verification into a caller_id alert"
    )


def _enrol(svc: Services, speech: voices.Speech | None, state: models.ModelState, key: str) -> bool:
    """The watch-listed voice, through ``callshield watchlist add`` and the dashboard."""
    split = voices.watchlist_split(speech) if speech else None
    if split is None or not (state.speaker and state.cohort):
        return False
    key_file = svc.root / "analyst.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    wavs = [a for path in split[0] for a in ("--wav", str(path))]
    out = svc.cli(
        "watchlist", "--models-dir", str(svc.models_dir), "add", *wavs,
        "--label", f"demo fraudster ({voices.WATCHED})", "--legal-basis", "demo",
        "--case-ref", "DEMO-1", "--expires-days", "1",
        "--dashboard", svc.dashboard_url, "--api-key", f"file:{key_file}",
    )  # fmt: skip
    print(f"watchlist: {out.strip()} (two-person approval is off for the demo)")
    return True


def _wait_calls(calls: list[SipCall], stop: Stop, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.event.is_set():
        if all(c.state in ("ended", "failed") for c in calls):
            break
        stop.event.wait(0.2)
    for call in calls:
        if call.state == "failed":
            print(f"  call {call.plan.name} failed: {call.detail}")
