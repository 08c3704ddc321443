"""Detector capacity: ramp concurrent calls until detector queue wait or tick lag breaks.

Each synthetic call has two legs of real speech (the caller talks half the time: 4 s on,
4 s off, offset per call; the agent leg is ingested but never analysed for voice) sent
as G.711 µ-law RTP through one native jitter buffer per leg, pulled every 20 ms on a
real-time clock and handed to the detector runtime (windowing, micro-batching
scheduler, fusion) with the fixture models: the AASIST-shaped model (AASIST's front end
and encoder compute), the embedding model and the energy VAD (``--vad-gate``: net
speech also gated by Silero, whose cost is reported). ``--models-dir``: the models
installed there instead (the shipped set: the synthetic-voice model, the speaker model,
and Silero VAD gating the frame bank when installed there), at their manifests' hops
unless ``--hop`` is given; the directory must hold a synthetic_voice model. Calls are
added in steps; each step runs ``--step-seconds`` and reports detector queue wait, tick
lag (how late each 20 ms tick started), CPU per call and window outcomes. The ramp stops at the
first step where queue wait p99 > 250 ms, tick lag p99 > 5 ms, any window was
unavailable or admission did not analyse a call (``refused``: calls join through
admission's cost estimate as on the bridge, and a refused call is never scored, so the
step's figures would describe fewer calls than it names; ``calls_analysed`` says how
many were) (``--keep-going``: on to ``--max-calls``, each step naming the criteria it
failed); the knee is the last step before the first failure. In the same run, the synthetic-voice
model's throughput with batches of ``--max-batch`` is measured against batch 1 (the
same worker threads, back to back).

``--tick-jitter`` measures instead, at ``--start`` calls, the 20 ms tick lateness (and
every collector pause, from ``gc.callbacks``) under three GC regimes in the same run,
interleaved ``--jitter-rounds`` times for ``--step-seconds`` each: ``default`` (no
freeze, CPython's thresholds), ``frozen`` (``gc.freeze()`` after warm-up) and
``frozen_gen0`` (frozen, gen0 threshold raised: what the bridge does,
``sip_bridge.gc_discipline``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.admission import AdmissionConfig
from detectors.alert_schema import Alert, Dimension, LegRole, ScoreUpdate
from detectors.contract import WindowResult
from detectors.manifest import ModelManifest
from detectors.model_store import Installed, ModelStore
from detectors.onnx_detector import OnnxDetector, probe_providers
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig
from detectors.vad.gate import VadGate, gate_from_store
from detectors.vad.install import NAME as VAD_NAME
from native.codec import build_rtp, ulaw_encode
from native.ingest import PulledFrames
from native.ingest_types import FRAME_INFO_DTYPE
from native.jitter import JitterBuffer
from sip_bridge.bench.report import summarize
from sip_bridge.demo import find_speech, leg_audio
from sip_bridge.detector_lanes import DetectorConcurrency
from sip_bridge.gc_discipline import GEN0_THRESHOLD, freeze_after_warm_up, thaw
from sip_bridge.settings import Settings

FRAME_NS = 20_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start", type=int, default=8, help="calls in the first step")
    parser.add_argument("--step", type=int, default=8, help="calls added per step")
    parser.add_argument("--max-calls", type=int, default=96)
    parser.add_argument("--step-seconds", type=float, default=12.0)
    parser.add_argument(
        "--hop", type=float, help="synthetic-voice hop, s (fixtures: 2; installed: manifest's)"
    )
    parser.add_argument(
        "--max-batch", type=int, help="windows per batch (default: the bridge's detector_max_batch)"
    )
    parser.add_argument("--max-wait-ms", type=float, default=50.0)
    parser.add_argument(
        "--workers", type=int, help="detector threads (default: the bridge's, from settings)"
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        help="batches of one model at once (default: the bridge's, from settings)",
    )
    parser.add_argument("--threads", type=int, help="ONNX intra-op threads (default: the bridge's)")
    parser.add_argument("--tiny", action="store_true", help="tiny fixtures (smoke tests)")
    parser.add_argument("--speech-dir", type=Path)
    parser.add_argument(
        "--models-dir",
        type=Path,
        help="the models installed there instead of the fixtures (needs a synthetic_voice one)",
    )
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=1.0,
        help="Python's GIL switch interval (default 5 ms lets a worker hold the tick back)",
    )
    parser.add_argument(
        "--tick-jitter",
        action="store_true",
        help="at --start calls, tick lateness with and without the GC freeze (no ramp)",
    )
    parser.add_argument("--jitter-rounds", type=int, default=2)
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="ramp to --max-calls past the knee (each step says which criterion failed)",
    )
    parser.add_argument(
        "--vad-gate",
        action="store_true",
        help="gate net speech with Silero (copied from the silero-vad wheel) and report its cost",
    )


class _Publisher:
    def __init__(self) -> None:
        self.alerts = 0

    def publish_alert(self, alert: Alert) -> None:
        self.alerts += 1

    def publish_score(self, update: ScoreUpdate) -> None:
        pass


class _Stats:
    """Observations of one step (written from worker threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits: list[float] = []
        self.batches: list[int] = []
        self.outcomes: dict[str, int] = {}
        # calls admission did not analyse (call id -> reason): they stay in every later
        # step's call count, so each later step carries them too
        self.refused: dict[str, str] = {}

    def observe(self, name: str, size: int, run_s: float, waits: list[float]) -> None:
        with self.lock:
            self.waits.extend(waits)
            self.batches.append(size)

    def result(self, r: WindowResult) -> None:
        key = r.abstained.value if r.abstained else "scored"
        with self.lock:
            self.outcomes[key] = self.outcomes.get(key, 0) + 1


class _Leg:
    def __init__(self, sid: int, pcm: npt.NDArray[np.int16]) -> None:
        self.sid = sid
        self.jb = JitterBuffer()
        self.payload = ulaw_encode(pcm[: len(pcm) // 160 * 160])
        self.frames = len(self.payload) // 160
        self.k = 0

    def feed(self, now_ns: int) -> None:
        i = self.k % self.frames
        datagram = build_rtp(
            self.payload[i * 160 : (i + 1) * 160],
            seq=self.k & 0xFFFF,
            ts=(self.k * 160) & 0xFFFFFFFF,
            ssrc=0x5EED0000 + self.sid,
            marker=self.k == 0,
        )
        self.jb.insert(datagram, now_ns)
        self.k += 1


def concurrency(args: argparse.Namespace) -> DetectorConcurrency:
    """The bridge's detector concurrency (its settings: defaults and CALLSHIELD_*), with
    the flags given applied."""
    bridge = DetectorConcurrency.from_settings(Settings())
    try:
        return bridge.override(args.workers, args.max_inflight, args.threads)
    except ValueError as exc:
        raise SystemExit(f"bench capacity: {exc}") from None


def _models(args: argparse.Namespace) -> list[OnnxDetector]:
    """The detectors, the synthetic-voice one first."""
    from detectors.fixture_models import aasist_fixture, embedding_fixture, vad_fixture

    choice = probe_providers()
    out = []
    if args.models_dir is not None:
        found: list[tuple[ModelManifest, bytes | Path]] = [
            (m.manifest, m.model_path) for m in _installed(args.models_dir)
        ]
    else:
        args.hop = 2.0 if args.hop is None else args.hop
        fixtures = (aasist_fixture(args.tiny), embedding_fixture(args.tiny), vad_fixture())
        found = [(m, d) for d, m in fixtures]
    found.sort(key=lambda f: f[0].dimension is not Dimension.SYNTHETIC_VOICE)
    for manifest, data_or_path in found:
        if manifest.dimension is Dimension.SYNTHETIC_VOICE and args.hop is not None:
            hop = int(args.hop * manifest.input.sample_rate)
            manifest = manifest.model_copy(
                update={"input": manifest.input.model_copy(update={"hop": hop})}
            )
        out.append(OnnxDetector(manifest, data_or_path, choice, intra_op_threads=args.threads))
    args.hop = out[0].spec.hop_s  # the synthetic-voice hop the calls join over
    return out


def _installed(models_dir: Path) -> list[Installed]:
    """The detector models installed in ``models_dir`` (not fixtures, not the VAD: that
    gates the frame bank); a clear error without a synthetic_voice model."""
    store = ModelStore(models_dir)
    out = []
    for name in sorted({i.manifest.name for i in store.installed()}):
        found = store.get(name)
        if name != VAD_NAME and not found.manifest.fixture:
            out.append(found)
    from detectors.model_store import ModelSettings
    from sip_bridge.wiring import select_models

    try:  # what the bridge would load: one model per dimension (CALLSHIELD_DETECTOR_MODELS)
        chosen = select_models(
            {i.manifest.name: i.manifest.dimension for i in out},
            ModelSettings(models_dir=models_dir).detector_models,
        )
    except ValueError as exc:
        raise SystemExit(f"--models-dir {models_dir}: {exc}") from exc
    out = [i for i in out if i.manifest.name in chosen]
    if not any(i.manifest.dimension is Dimension.SYNTHETIC_VOICE for i in out):
        names = ", ".join(i.manifest.key for i in out) or "none"
        raise SystemExit(
            f"--models-dir {models_dir}: no synthetic_voice model installed there (found: "
            f"{names}); train one with `callshield models train-synthetic --out DIR`"
        )
    return out


def _call_audio(files: list[Path], call: int, seconds: float) -> tuple[Any, Any]:
    caller = leg_audio(files, 2 * call, seconds).copy()
    agent = leg_audio(files, 2 * call + 1, seconds)
    t = (np.arange(caller.size) / 8000 + call * 1.3) % 8.0
    caller[t >= 4.0] = 0  # the caller talks half the time
    return caller, agent


def _throughput_ratio(
    det: OnnxDetector, max_batch: int, workers: int, windows: int
) -> dict[str, Any]:
    """Windows/s at batch 1 and at max_batch, ``workers`` threads back to back."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((max_batch, det.spec.window)) * 0.05).astype(np.float32)

    def rate(batch: int) -> float:
        per_worker = max(1, windows // (batch * workers))

        def work() -> None:
            for _ in range(per_worker):
                det.run_batch(x[:batch])

        threads = [threading.Thread(target=work) for _ in range(workers)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return per_worker * batch * workers / (time.perf_counter() - t0)

    single, batched = rate(1), rate(max_batch)
    return {
        "model": det.spec.name,
        "batch": max_batch,
        "workers": workers,
        "windows_per_s_batch_1": single,
        f"windows_per_s_batch_{max_batch}": batched,
        "ratio": batched / single,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    files = find_speech(args.speech_dir)
    conc = concurrency(args)
    args.max_batch = args.max_batch or conc.max_batch
    args.workers, args.max_inflight, args.threads = (
        conc.workers,
        conc.max_inflight,
        conc.intra_op_threads,
    )
    detectors = _models(args)
    stats = _Stats()
    publisher = _Publisher()
    lanes = conc.lane(
        LaneConfig(max_batch=args.max_batch, max_wait_s=args.max_wait_ms / 1000, deadline_s=2.0)
    )
    rt = DetectorRuntime(
        detectors,
        publisher,
        config=RuntimeConfig(
            workers=conc.workers,
            max_legs=2 * args.max_calls + 2,
            lanes=lanes,
            admission=AdmissionConfig(max_calls=10_000),
        ),
        observer=stats.observe,
        on_result=stats.result,
    )
    gate = _vad_gate(rt) if args.vad_gate else None
    if gate is None and args.models_dir is not None:
        gate = gate_from_store(args.models_dir, rt.config.max_legs, rt.bank.ring_frames)
        rt.bank.vad = gate
    t_warm = time.perf_counter()
    rt.start()
    warm_s = time.perf_counter() - t_warm
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(args.switch_interval_ms / 1000)
    if args.tick_jitter:
        try:
            jitter = _tick_jitter(rt, files, stats, args)
        finally:
            rt.close()
            if gate is not None:
                gate.close()
            sys.setswitchinterval(old_switch)
        return {
            "benchmark": "capacity-tick-jitter",
            "provider": detectors[0].provider,
            "calls": args.start,
            "config": {
                "models": [d.spec.name for d in detectors],
                "rounds": args.jitter_rounds,
                "step_seconds": args.step_seconds,
                "switch_interval_ms": args.switch_interval_ms,
                "gen0_threshold_frozen": GEN0_THRESHOLD,
                "default_thresholds": gc.get_threshold(),
            },
            "warm_up_s": warm_s,
            "tick_jitter": jitter,
            "vad_gate": _gate_cost(gate),
        }
    frozen = freeze_after_warm_up()  # DESIGN §3: as the bridge, after warm-up
    legs: list[_Leg] = []
    steps: list[dict[str, Any]] = []
    knee = 0
    call_seconds = 60.0
    n_calls = 0
    try:
        target, broken = args.start, False
        while target <= args.max_calls:
            joins: list[tuple[int, str, list[_Leg]]] = []
            spread = int(args.hop * 50)  # new calls join spread over one hop, not at once
            for j in range(target - n_calls):
                cid = f"call{n_calls}"
                caller, agent = _call_audio(files, n_calls, call_seconds)
                new = [_Leg(len(legs) + k, pcm) for k, pcm in enumerate((caller, agent))]
                legs.extend(new)
                joins.append((j * spread // max(1, target - n_calls), cid, new))
                n_calls += 1
            step = _run_step(rt, legs, joins, stats, args.step_seconds)
            step["calls"] = n_calls
            steps.append(step)
            broken = broken or not step["ok"]
            if not broken:
                knee = n_calls  # every step so far passed
            elif not args.keep_going:
                break
            target += args.step
    finally:
        rt.close()
        if gate is not None:
            gate.close()
        thaw(frozen)
        sys.setswitchinterval(old_switch)
    ratio = _throughput_ratio(detectors[0], args.max_batch, args.workers, 8 if args.tiny else 48)
    return {
        "benchmark": "capacity",
        "provider": detectors[0].provider,
        "provider_reason": probe_providers().reason,
        "config": {
            "models": {
                d.spec.name: {"window_s": d.spec.window_s, "hop_s": d.spec.hop_s} for d in detectors
            },
            "models_source": str(args.models_dir) if args.models_dir else "fixtures",
            "silero_vad_gate": gate is not None,
            "max_batch": args.max_batch,
            "max_wait_ms": args.max_wait_ms,
            "workers": conc.workers,
            "max_inflight": conc.max_inflight,
            "intra_op_threads": conc.intra_op_threads,
            "lanes": {
                name: {"max_inflight": c.max_inflight, "max_batch": c.max_batch}
                for name, c in rt.scheduler.lane_configs().items()
            },
            "bridge_defaults": DetectorConcurrency.from_settings(Settings()).as_dict(),
            "switch_interval_ms": args.switch_interval_ms,
            "step_seconds": args.step_seconds,
            "talk_ratio": 0.5,
            "legs_per_call": 2,
            "criteria": (
                "queue wait p99 <= 250 ms, tick lag p99 <= 5 ms, no unavailable window, "
                "every call analysed"
            ),
        },
        "warm_up_s": warm_s,
        "knee_calls": knee,
        "steps": steps,
        "alerts": publisher.alerts,
        "batched_vs_unbatched": ratio,
        "vad_gate": _gate_cost(gate),
    }


def _join(rt: DetectorRuntime, cid: str, new: list[_Leg], stats: _Stats) -> None:
    """Opens the call through admission as the bridge does; a call it does not analyse
    (capacity estimate or queue wait) is recorded, and its legs stay unregistered."""
    decision = rt.open_call(cid)
    if not decision.analysed:
        with stats.lock:
            stats.refused[cid] = decision.reason or "not analysed"
        return
    rt.add_leg(cid, new[0].sid, "caller", LegRole.EXTERNAL)
    rt.add_leg(cid, new[1].sid, "agent", LegRole.INTERNAL)


def _run_step(
    rt: DetectorRuntime,
    legs: list[_Leg],
    joins: list[tuple[int, str, list[_Leg]]],
    stats: _Stats,
    seconds: float,
    lags_out: list[float] | None = None,
) -> dict[str, Any]:
    """Run ``seconds`` of 20 ms ticks; ``joins``: (tick, call id, legs) to add on the way
    (legs not yet joined are fed but ignored by the runtime, as unregistered streams);
    ``lags_out`` collects every tick's lateness (ms)."""
    ids = np.array([leg.sid for leg in legs], np.int32)
    pcm = np.zeros((len(legs), 160), np.int16)
    infos = np.zeros(len(legs), FRAME_INFO_DTYPE)
    pulled = PulledFrames(ids, pcm, infos)
    with stats.lock:
        stats.waits.clear()
        stats.batches.clear()
        stats.outcomes.clear()
    lags: list[float] = []
    work: list[float] = []
    ticks = int(seconds * 50)
    cpu0 = time.process_time()
    start = time.monotonic_ns()
    for tick in range(ticks):
        due = start + tick * FRAME_NS
        now = time.monotonic_ns()
        if now < due:
            time.sleep((due - now) / 1e9)
            now = time.monotonic_ns()
        lags.append((now - due) / 1e6)
        while joins and joins[0][0] <= tick:
            _join(rt, joins[0][1], joins[0][2], stats)
            joins.pop(0)
        for i, leg in enumerate(legs):
            leg.feed(now)
            leg.jb.pull_into(now, pcm[i])
            info = leg.jb.last_info
            infos[i]["flag"] = info.flag
            infos[i]["real_mask"] = info.real_mask
        rt.on_frames(pulled)
        work.append((time.monotonic_ns() - now) / 1e6)
    time.sleep(0.3)  # let the last batches finish
    if lags_out is not None:
        lags_out.extend(lags)
    cpu = time.process_time() - cpu0
    wall = (time.monotonic_ns() - start) / 1e9
    with stats.lock:
        waits = [w * 1000 for w in stats.waits]
        outcomes = dict(stats.outcomes)
        batches = list(stats.batches)
        refused = dict(stats.refused)
    wait_s = summarize(waits, "ms")
    lag_s = summarize(lags, "ms")
    unavailable = outcomes.get("unavailable", 0)
    failed = [
        name
        for name, bad in (
            ("queue_wait_p99", wait_s.get("p99", 0.0) > 250.0),
            ("tick_lag_p99", lag_s.get("p99", 0.0) > 5.0),
            ("unavailable", unavailable > 0),
            # a step whose calls admission would not analyse did not score them: its
            # other figures describe fewer calls than the step names
            ("refused", bool(refused)),
        )
        if bad
    ]
    n_calls = len(legs) // 2
    reasons: dict[str, int] = {}
    for why in refused.values():
        reasons[why] = reasons.get(why, 0) + 1
    return {
        "ok": not failed,
        "failed": failed,
        "calls_analysed": n_calls - len(refused),
        "refused_reasons": reasons,
        "queue_wait": wait_s,
        "tick_lag": lag_s,
        "tick_work": summarize(work, "ms"),
        "cpu_percent_of_one_core": 100 * cpu / wall,
        "cpu_percent_per_call": 100 * cpu / wall / max(1, n_calls),
        "windows": outcomes,
        "mean_batch": float(np.mean(batches)) if batches else 0.0,
        "capacity_estimate_calls": rt.admission.capacity(),
    }


class _GcPauses:
    """Every collector pass (any thread) while installed: duration and generation."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], (time.perf_counter() - self._t0) * 1000))


def _tick_jitter(
    rt: DetectorRuntime, files: list[Path], stats: _Stats, args: argparse.Namespace
) -> dict[str, Any]:
    """Tick lateness under each GC regime, interleaved in one run (see the docstring)."""
    legs: list[_Leg] = []
    joins: list[tuple[int, str, list[_Leg]]] = []
    for c in range(args.start):
        caller, agent = _call_audio(files, c, 60.0)
        new = [_Leg(len(legs) + k, pcm) for k, pcm in enumerate((caller, agent))]
        legs.extend(new)
        joins.append((c * int(args.hop * 50) // max(1, args.start), f"call{c}", new))
    _run_step(rt, legs, joins, stats, max(2.0 * args.hop, 2.0))  # join and settle
    defaults = gc.get_threshold()
    modes = ("default", "frozen", "frozen_gen0")
    lags: dict[str, list[float]] = {m: [] for m in modes}
    pauses: dict[str, list[tuple[int, float]]] = {m: [] for m in modes}
    unavailable = dict.fromkeys(modes, 0)
    for _ in range(max(1, args.jitter_rounds)):
        for mode in modes:
            frozen = None
            if mode != "default":
                frozen = freeze_after_warm_up(GEN0_THRESHOLD if mode == "frozen_gen0" else 0)
            watch = _GcPauses()
            gc.callbacks.append(watch)
            try:
                step = _run_step(rt, legs, [], stats, args.step_seconds, lags[mode])
            finally:
                gc.callbacks.remove(watch)
                if frozen is not None:
                    thaw(frozen)
                gc.set_threshold(*defaults)
            pauses[mode].extend(watch.pauses)
            unavailable[mode] += step["windows"].get("unavailable", 0)
    out: dict[str, Any] = {}
    for mode in modes:
        p = pauses[mode]
        out[mode] = {
            "tick_lag": summarize(lags[mode], "ms"),
            "gc_pause": summarize([ms for _, ms in p], "ms"),
            "gc_passes_per_generation": {g: sum(1 for gg, _ in p if gg == g) for g in range(3)},
            "unavailable_windows": unavailable[mode],
        }
    return out


def _vad_gate(rt: DetectorRuntime) -> VadGate:
    """Silero, copied from the installed silero-vad wheel into a temporary models
    directory (as ``callshield models install-vad``), gating the runtime's frame bank."""
    from detectors.vad.install import install_vad

    folder = Path(tempfile.mkdtemp(prefix="callshield-vad-"))
    install_vad(folder)
    gate = gate_from_store(folder, rt.config.max_legs, rt.bank.ring_frames)
    if gate is None:
        raise RuntimeError(f"Silero VAD not found in {folder} after install")
    rt.bank.vad = gate
    return gate


def _gate_cost(gate: VadGate | None) -> dict[str, Any] | None:
    """The VAD gate's ONNX Runtime time: per leg-second of audio and per batched step."""
    if gate is None or not gate.chunks:
        return None
    leg_s = gate.chunks * gate.vad.chunk / gate.vad.sample_rate
    return {
        "ms_per_leg_second": 1000 * gate.step_s / leg_s,
        "ms_per_4s_window": 4000 * gate.step_s / leg_s,
        "ms_per_batched_step": 1000 * gate.step_s / gate.steps,
        "mean_legs_per_step": gate.chunks / gate.steps,
        "steps": gate.steps,
    }
