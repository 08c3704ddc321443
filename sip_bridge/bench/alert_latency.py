"""Alert latency: audio in -> alert out through the real bridge, N calls beside one.

A real bridge in this process (its full wiring: native jitter buffer, detector runtime
with the dev fixture models or, with ``--models-dir``, the models installed there (the
shipped set: the synthetic-voice model, the speaker model, Silero VAD), fusion under the
built-in policy, the Redis publisher) and
its own redis-server. Calls come through the control API, each one external leg of real
speech as µ-law RTP paced every 20 ms: ``--lead-s`` of genuine speech (plus up to 0.9 s,
spread between calls so utterances fall at every phase of the window grid), then one
*suspicious utterance* of ``--utterance-s`` (speech with the synthetic-voice fixture's
marker tone; with ``--models-dir``, synthetic speech from ``--spoof-dir``, WAVs of any
rate resampled to 8 kHz, e.g. a ``train-synthetic`` work folder's generated test
spoofs of a family the model catches), then ``--tail-s`` of silence (the caller stops
talking). Rounds of ``--calls`` concurrent calls alternate with rounds of one call
alone (the same-run baseline); before each round the bench waits until the bridge's
admission queue-wait signal is under its limit (``settle_before_rounds_s``). A call
whose utterance raised no alert is counted, not sampled.

When a load round's calls start (``--arrivals``, ``sip_bridge.bench.arrivals``): each
call's window grid runs from its own start, so calls started together score in phase and
every hop all their windows of a model reach its lane at once. ``staggered`` (default)
spreads the starts uniformly at random (seeded per round: ``--arrival-seed``) over one hop
of the voice model with the longest hop (or ``--arrival-spread-s``): the steady load of N
concurrent calls that arrived independently, which issue 5's goal ("alert latency ... at
that load") is about. ``aligned`` starts them all in one loop: a predictive dialer's
campaign burst, the worst case for the detector lanes, reported as its own figure. The
spread is at most ``--lead-s`` (a longer hop is cut to it, a longer ``--arrival-spread-s``
refused), so every call is up before the first utterance starts and all N are running
through every utterance. Latency is measured per call from its own
utterance end and each utterance keeps its onset in its own call (its phase on its own
grid), so the arrivals change the load, not the measurement; the baseline rounds are one
call alone either way.

Two latencies per call (the alert's first revision):
- ``from_utterance_end`` (issue 5's goal): the wall-clock time the alert object was
  handed to the publisher minus the send time of the utterance's last marked RTP packet
  (loopback: its arrival). Negative when the alert was out before the utterance ended.
- ``from_onset`` (DESIGN §10's detection latency): the Redis time of the alert's stream
  entry minus the send time of the utterance's first marked packet.
And where the first one goes, per alert (``stages``, ms): ``to_window_close`` (last marked
packet -> the window that opened the alert was cut; negative when it was cut before the
end), ``queue_wait``, ``inference`` (batch start -> result), ``held`` (result -> out of
the result stages, e.g. the replay stage holding it for the allowlist) and ``fusion``
(-> handed to the publisher). Also measured: how long a policy stored in Redis takes to
be in force on the bridge (``--policy-changes`` changes, while no call runs). ``--trace
FILE`` writes each call's synthetic_voice window timeline (``sip_bridge.bench.
window_trace``): which window raised its alert, and what was cut before it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import redis
import redis.asyncio

from detectors.alert_schema import Abstention, Alert, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.policy import PolicyBody
from detectors.bus.policy_store import PolicyStore
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from detectors.contract import VOICE_DIMENSIONS, WindowResult
from detectors.eval.audio import read_audio, resample, to_int16
from detectors.fusion import AlertPublisher
from detectors.model_store import ModelSettings, ModelStore
from detectors.runtime import DetectorRuntime, DrainingStage, GatingStage, ResultStage
from sip_bridge.bench.api_calls import ApiCall, BridgeHost, bridge_settings, utterance
from sip_bridge.bench.arrivals import (
    Arrivals,
    Spread,
    hop_spread,
    round_seed,
    start_offsets,
    window_cost_s,
)
from sip_bridge.bench.report import summarize
from sip_bridge.bench.window_trace import WindowTrace
from sip_bridge.demo import find_speech, leg_audio
from sip_bridge.wiring import Wiring

TOKEN = "bench-alert-latency"
PREFIX = "bench:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=8, help="concurrent calls per load round")
    parser.add_argument("--rounds", type=int, default=3, help="load rounds (and baseline rounds)")
    parser.add_argument("--lead-s", type=float, default=2.0, help="genuine speech before marker")
    parser.add_argument(
        "--utterance-s", type=float, help="the marked utterance (default 3 s, tiny 0.6 s)"
    )
    parser.add_argument("--tail-s", type=float, default=5.0, help="silence after the utterance")
    parser.add_argument("--policy-changes", type=int, default=20)
    parser.add_argument("--models", choices=("full", "tiny"), default="full", help="fixtures")
    parser.add_argument("--tiny", action="store_true", help="tiny fixtures, 2 calls, 1 round")
    parser.add_argument("--speech-dir", type=Path)
    parser.add_argument(
        "--models-dir",
        type=Path,
        help="installed models instead of the fixtures (must hold a synthetic_voice model)",
    )
    parser.add_argument(
        "--spoof-dir", type=Path, help="with --models-dir: synthetic speech WAVs (any rate)"
    )
    parser.add_argument(
        "--arrivals",
        choices=[a.value for a in Arrivals],
        default=Arrivals.STAGGERED.value,
        help="load-round call starts: staggered over one hop (independent arrivals, "
        "default) or aligned in one tick (a dialer burst)",
    )
    parser.add_argument(
        "--arrival-spread-s",
        type=float,
        help="staggered: spread starts over this many seconds (default: the longest voice "
        "model hop; at most --lead-s)",
    )
    parser.add_argument("--arrival-seed", type=int, default=0, help="staggered: the draw's seed")
    parser.add_argument(
        "--trace",
        type=Path,
        help="write every call's synthetic_voice window timeline (grid and utterance-end "
        "windows, scores, abstentions, the alert's window) to this JSON file",
    )


_SV = Dimension.SYNTHETIC_VOICE
_CLOCK = time.time() - time.monotonic()  # monotonic -> wall


class _Stamps:
    """Fusion's publisher and the runtime's result stages, wrapped: when each
    synthetic_voice window left inference and the result stages, and when each call's
    first alert was handed to the publisher (wall clock)."""

    def __init__(self, runtime: DetectorRuntime) -> None:
        self.publisher: AlertPublisher = runtime.fusion.publisher
        self.stage: ResultStage | None = runtime.stage
        self.windows: dict[tuple[str, float], tuple[float, float, float, float]] = {}
        self.alerts: dict[str, tuple[float, float]] = {}  # call -> (handed, trigger end_s)
        self.trace: WindowTrace | None = None
        self._lock = threading.Lock()
        runtime.fusion.publisher = self
        runtime.stage = self

    # ---- publisher
    def publish_alert(self, alert: Alert) -> None:
        if alert.dimension is _SV and alert.revision == 1:
            end = max((r.end_s for r in alert.reasons), default=0.0)
            with self._lock:
                self.alerts.setdefault(alert.call_id, (time.time(), end))
        self.publisher.publish_alert(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        self.publisher.publish_score(update)

    # ---- result stage
    def open_call(self, call_id: str, tenant: str = "default") -> None:
        if self.stage is not None:
            self.stage.open_call(call_id, tenant)

    def end_call(self, call_id: str) -> None:
        if self.stage is not None:
            self.stage.end_call(call_id)

    def gate(self, detector: str, call_id: str) -> Abstention | None:
        return self.stage.gate(detector, call_id) if isinstance(self.stage, GatingStage) else None

    def drain(self, call_id: str) -> tuple[WindowResult, ...]:
        return self.stage.drain(call_id) if isinstance(self.stage, DrainingStage) else ()

    def process(self, result: WindowResult) -> tuple[WindowResult, ...]:
        t_in = time.time()
        out = (result,) if self.stage is None else self.stage.process(result)
        t_out = time.time()
        if self.trace is not None:
            self.trace.note(result)
        with self._lock:
            if result.dimension is _SV and result.score is not None:
                key = (result.key.call_id, round(result.key.end_s, 3))
                ready = result.ready_at + _CLOCK
                self.windows[key] = (ready, result.queue_wait_s, t_in, t_in)
            for r in out:
                key = (r.key.call_id, round(r.key.end_s, 3))
                if r.dimension is _SV and key in self.windows:
                    ready, wait, t_scored, _ = self.windows[key]
                    self.windows[key] = (ready, wait, t_scored, t_out)
        return out


def _round(
    host: BridgeHost,
    audio: list[npt.NDArray[np.int16]],
    onsets: list[float],
    length_s: float,
    starts: list[float] | None = None,
) -> list[ApiCall]:
    """One round: the calls started ``starts`` seconds after the round's start (all at
    once when None), in time order; returns when every call has ended."""
    calls = [
        ApiCall(host.api_url, TOKEN, a, o, o + length_s) for a, o in zip(audio, onsets, strict=True)
    ]
    offsets = starts if starts is not None else [0.0] * len(calls)
    t0 = time.monotonic()
    for offset, c in sorted(zip(offsets, calls, strict=True), key=lambda p: p[0]):
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        c.start()
    for c in calls:
        c.wait()
        c.end()
    return calls


def _from_onset(client: redis.Redis, keys: Keys, calls: list[ApiCall]) -> tuple[list[float], int]:
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
        if c.refused:
            continue
        ms = first.get(c.call_id)
        if ms is None or c.onset_wall is None:
            missed += 1
            continue
        out.append(ms - c.onset_wall * 1000.0)
    return out, missed


def _from_end(stamps: _Stamps, calls: list[ApiCall]) -> dict[str, Any]:
    """Handed to the publisher minus the utterance's last packet, and its stages (ms)."""
    total: list[float] = []
    stages: dict[str, list[float]] = {
        k: [] for k in ("to_window_close", "queue_wait", "inference", "held", "fusion")
    }
    missed = 0
    for c in calls:
        if c.refused:
            continue
        got = stamps.alerts.get(c.call_id)
        if got is None or c.offset_wall is None:
            missed += 1
            continue
        handed, end_s = got
        total.append((handed - c.offset_wall) * 1000.0)
        w = stamps.windows.get((c.call_id, round(end_s, 3)))
        if w is None:
            continue
        ready, wait, scored, out = w
        parts = (ready - c.offset_wall, wait, scored - ready - wait, out - scored, handed - out)
        for name, value in zip(stages, parts, strict=True):
            stages[name].append(value * 1000.0)
    return {
        "latency": summarize(total, "ms"),
        "before_end": sum(1 for t in total if t < 0),
        "no_alert": missed,
        "stages": {k: summarize(v, "ms") for k, v in stages.items()},
    }


def _settle(wiring: Wiring) -> float:
    """Before a round: wait (up to the admission's horizon and a second) until the
    bridge's queue-wait signal is under its limit again, so a round is not refused for
    the backlog of the one before (a refused round ends at once, and the next would
    follow it inside the horizon). Returns the seconds waited."""
    adm = wiring.runtime.admission
    t0 = time.monotonic()
    end = t0 + adm.config.wait_horizon_s + 1.0
    while adm.queue_wait() > adm.config.queue_wait_limit_s and time.monotonic() < end:
        time.sleep(0.1)
    return time.monotonic() - t0


def _spread(wiring: Wiring, given_s: float | None, lead_s: float) -> Spread:
    """What staggered starts are spread over (timing the voice models unless given)."""
    costs = []
    if given_s is None:
        voice = [d for d in wiring.detectors if d.spec.dimension in VOICE_DIMENSIONS]
        costs = [(d.spec, window_cost_s(d)) for d in voice]
    try:
        spread = hop_spread(costs, given_s)
    except ValueError as exc:
        raise SystemExit(f"--arrivals: {exc}") from exc
    if spread.seconds > lead_s:  # a given spread was checked against the lead already
        spread = Spread(lead_s, f"{spread.source}, {spread.seconds} s, cut to --lead-s")
    return spread


def _round_summary(stamps: _Stamps, calls: list[ApiCall]) -> dict[str, Any]:
    """One load round's refusals, misses and latency from utterance end (ms)."""
    end = _from_end(stamps, calls)
    lat = end["latency"]
    return {
        "refused": sum(c.refused for c in calls),
        "no_alert": end["no_alert"],
        "p50_ms": lat.get("p50"),
        "p99_ms": lat.get("p99"),
        "inference_p50_ms": end["stages"]["inference"].get("p50"),
    }


def _start_span(calls: list[ApiCall]) -> float | None:
    """Seconds between the first and the last first RTP packet of a round's calls."""
    started = [c.started_wall for c in calls if not c.refused and c.started_wall]
    return round(max(started) - min(started), 3) if started else None


def _reasons(calls: list[ApiCall]) -> dict[str, int]:
    """The bridge's 503 bodies of the refused calls, counted."""
    out: dict[str, int] = {}
    for c in calls:
        if c.refused:
            out[c.error] = out.get(c.error, 0) + 1
    return out


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


def _installed(models_dir: Path) -> str:
    """The installed models' names and versions; a clear error when the directory has no
    synthetic_voice model (nothing would ever alert)."""
    store = ModelStore(models_dir)
    found = [i.manifest for i in store.installed() if not i.manifest.fixture]
    if not any(m.dimension is _SV for m in found):
        raise SystemExit(
            f"--models-dir {models_dir}: no synthetic_voice model installed there "
            f"(found: {', '.join(m.key for m in found) or 'none'}); train one with "
            "`callshield models train-synthetic --out DIR`"
        )
    return ", ".join(sorted(m.key for m in found))


def _spoofs(folder: Path) -> list[npt.NDArray[np.int16]]:
    files = sorted(folder.rglob("*.wav"))
    if not files:
        raise SystemExit(f"--spoof-dir {folder}: no WAV files")
    out = []
    for f in files:
        x, rate = read_audio(f)
        out.append(to_int16(resample(x, rate, 8000)))
    return out


def _spoof_utterance(
    speech: npt.NDArray[np.int16],
    spoofs: list[npt.NDArray[np.int16]],
    k: int,
    onset_s: float,
    length_s: float,
) -> npt.NDArray[np.int16]:
    """``speech`` with ``length_s`` of synthetic speech (clips from the ``k``-th on)
    from ``onset_s``, then silence: a suspicious utterance with an end."""
    a, n = int(onset_s * 8000), int(length_s * 8000)
    parts, total = [], 0
    while total < n:
        clip = spoofs[k % len(spoofs)]
        parts.append(clip)
        total += clip.size
        k += 1
    out = speech.copy()
    out[a : a + n] = np.concatenate(parts)[:n]
    out[a + n :] = 0
    return out


def _write_trace(
    path: Path, stamps: _Stamps, load: list[ApiCall], base: list[ApiCall], calls_n: int
) -> None:
    """``--trace``: every analysed call's window timeline, load rounds then baseline."""
    assert stamps.trace is not None
    out = []
    for kind, calls in (("load", load), ("baseline", base)):
        for i, c in enumerate(calls):
            if c.refused or c.offset_s is None:
                continue
            line = stamps.trace.timeline(
                c.call_id, c.offset_s, c.offset_wall, stamps.alerts.get(c.call_id)
            )
            out.append(
                {"kind": kind, "round": i // max(1, calls_n) if kind == "load" else i} | line
            )
    path.write_text(json.dumps(out, indent=1))


def run(args: argparse.Namespace) -> dict[str, Any]:
    calls_n, rounds, changes = args.calls, args.rounds, args.policy_changes
    models = "tiny" if args.tiny else args.models
    models_dir: Path | None = args.models_dir
    spoofs: list[npt.NDArray[np.int16]] = []
    described = f"dev fixtures ({models})"
    if models_dir is not None:
        described = f"installed in {models_dir}: {_installed(models_dir)}"
        if args.spoof_dir is None:
            raise SystemExit("--models-dir needs --spoof-dir: synthetic speech the model flags")
        spoofs, models = _spoofs(args.spoof_dir), ""
    utt_s = args.utterance_s or (0.6 if models == "tiny" else 3.0)
    lead_s, tail_s = args.lead_s, args.tail_s
    if args.tiny:
        calls_n, rounds, changes, lead_s, tail_s = 2, 1, 5, 1.0, min(tail_s, 2.5)
    logging.getLogger("sip_bridge").setLevel(logging.WARNING)
    logging.getLogger("detectors").setLevel(logging.WARNING)
    arrivals = Arrivals(args.arrivals)
    if args.arrival_spread_s is not None and args.arrival_spread_s > lead_s:
        raise SystemExit(
            f"--arrival-spread-s {args.arrival_spread_s} exceeds --lead-s {lead_s}: the "
            "first utterances would start before the last calls are up"
        )
    files = find_speech(args.speech_dir)
    seconds = lead_s + 1.0 + utt_s + tail_s
    with tempfile.TemporaryDirectory(prefix="cs-bench-alert-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "redis", port=free_port())
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            bus = BusSettings.model_validate(
                {"redis_url": server.url, "state_dir": Path(tmp) / "state", "key_prefix": PREFIX}
            )
            # even ports only, quarantined after each call: room for every call of the run
            span = 4 * (calls_n + 1) * rounds + 200
            rtp = random.randrange(20000, 60000 - span, 400)
            wiring = Wiring(
                bridge_settings(
                    rtp,
                    TOKEN,
                    models,
                    max_analysed_calls=max(64, calls_n),
                    rtp_ports=f"{rtp}-{rtp + span}",
                ),
                bus,
                ModelSettings(models_dir=models_dir or Path(tmp) / "no-models"),
            )
            stamps = _Stamps(wiring.runtime)
            if args.trace is not None:
                stamps.trace = WindowTrace(wiring.runtime, _SV)

            def suspicious(
                speech: npt.NDArray[np.int16], k: int, onset: float
            ) -> npt.NDArray[np.int16]:
                if spoofs:
                    return _spoof_utterance(speech, spoofs, 3 * k, onset, utt_s)
                return utterance(speech, onset, utt_s)

            host = BridgeHost(wiring.settings, wiring)
            host.start()
            keys = Keys(PREFIX)
            base_calls: list[ApiCall] = []
            load_calls: list[ApiCall] = []
            start_spans: list[float | None] = []
            at_ready = wiring.runtime.admission.snapshot()  # seeded by the pre-warm timings
            capacity_before: list[int] = []
            capacity_after: list[int] = []
            try:
                spread = _spread(wiring, args.arrival_spread_s, lead_s)
                settle: list[float] = []
                for r in range(rounds):
                    base_onset = lead_s + (r % 10) / 10.0
                    audio = suspicious(leg_audio(files, r, seconds), r, base_onset)
                    settle.append(_settle(wiring))
                    base_calls += _round(host, [audio], [base_onset], utt_s)
                    onsets = [lead_s + (i % 10) / 10.0 for i in range(calls_n)]
                    load_audio = [
                        suspicious(leg_audio(files, r * calls_n + i, seconds), i, onsets[i])
                        for i in range(calls_n)
                    ]
                    starts = start_offsets(
                        calls_n, arrivals, spread.seconds, round_seed(args.arrival_seed, r)
                    )
                    settle.append(_settle(wiring))
                    capacity_before.append(wiring.runtime.admission.capacity())
                    this_round = _round(host, load_audio, onsets, utt_s, starts)
                    start_spans.append(_start_span(this_round))
                    capacity_after.append(wiring.runtime.admission.capacity())
                    load_calls += this_round
                admission = wiring.runtime.admission.snapshot()  # after the last round
                reach = _policy_reach(server.url, keys, wiring, changes)
                time.sleep(0.5)  # the publisher flushes
                base, base_missed = _from_onset(client, keys, base_calls)
                load, load_missed = _from_onset(client, keys, load_calls)
            finally:
                host.stop()
        finally:
            client.close()
            server.stop()
    if stamps.trace is not None:
        _write_trace(args.trace, stamps, load_calls, base_calls, calls_n)
    load_s, base_s = summarize(load, "ms"), summarize(base, "ms")
    load_end, base_end = _from_end(stamps, load_calls), _from_end(stamps, base_calls)
    p50, base_p50 = load_end["latency"].get("p50"), base_end["latency"].get("p50")
    return {
        "benchmark": "alert-latency",
        "setup": {
            "models": described,
            "suspicious_utterance": f"synthetic speech from {args.spoof_dir}"
            if spoofs
            else "speech with the fixture's marker tone",
            "policy": "built-in (synthetic_voice at its model's threshold: 2 of 3 "
            "windows, or one window with >= 2 s of speech at the single-window bar)",
            "concurrent_calls": calls_n,
            "rounds": rounds,
            "lead_s": lead_s,
            "utterance_s": utt_s,
            "tail_s": tail_s,
            "arrivals": {
                "mode": arrivals.value,
                "spread_s": spread.seconds if arrivals is Arrivals.STAGGERED else 0.0,
                "spread_from": spread.source if arrivals is Arrivals.STAGGERED else "one tick",
                "seed": args.arrival_seed if arrivals is Arrivals.STAGGERED else None,
            },
            "measured": "from_utterance_end: alert handed to the publisher - send time of "
            "the utterance's last marked RTP packet; from_onset: Redis stream time of the "
            "alert's first revision - send time of its first marked packet",
        },
        "load": {
            "from_utterance_end": load_end,
            "from_onset": load_s,
            "calls": len(load_calls),
            "refused": sum(c.refused for c in load_calls),  # 503: no detector capacity
            "refused_reasons": _reasons(load_calls),
            "no_alert": load_missed,
            "first_packet_span_s": start_spans,  # per round: first to last call's start
            "per_round": [
                _round_summary(stamps, load_calls[i : i + calls_n])
                for i in range(0, len(load_calls), max(1, calls_n))
            ],
        },
        "baseline_single_call": {
            "from_utterance_end": base_end,
            "from_onset": base_s,
            "calls": len(base_calls),
            "refused": sum(c.refused for c in base_calls),  # 503: no detector capacity
            "refused_reasons": _reasons(base_calls),
            "no_alert": base_missed,
        },
        "admission_at_ready": at_ready,
        "capacity_before_each_load_round": capacity_before,  # after its single-call round
        "capacity_after_each_load_round": capacity_after,
        "admission_after_last_round": admission,
        "settle_before_rounds_s": [round(x, 2) for x in settle],
        "policy_reload_reach": summarize(reach, "ms"),
        "summary": {
            "load_p50_ms": p50,
            "load_p99_ms": load_end["latency"].get("p99"),
            "load_p99.9_ms": load_end["latency"].get("p99.9"),  # only from 1,000 samples on
            "baseline_p50_ms": base_p50,
            "baseline_p99_ms": base_end["latency"].get("p99"),
            "load_from_onset_p50_ms": load_s.get("p50"),
            "baseline_from_onset_p50_ms": base_s.get("p50"),
            "ratio_p50": round(p50 / base_p50, 2) if p50 and base_p50 else None,
            "policy_reach_max_ms": max(reach) if reach else None,
        },
    }
