"""The detector runtime: frame bank, window plans, scheduler, fusion and admission wired
together for the media process (the bridge builds one and feeds it every tick).

    runtime = DetectorRuntime(detectors, publisher)
    runtime.start()                       # pre-warm and time every model and batch shape,
                                          # seed admission from the timings: ready
    decision = runtime.open_call("c1")    # admission: refused / shed / analysed
    runtime.add_leg("c1", stream_id, "caller", LegRole.EXTERNAL)
    every 20 ms: runtime.on_frames(ingest.pull_all(now_ns))

``on_frames`` runs on the playout-clock thread: it writes the frames into the bank and
queues complete windows (on each detector's hop grid and, for the dimensions in
``RuntimeConfig.utterance_ends``, also at every utterance end: ``detectors.windowing``),
nothing more; inference and fusion happen on the scheduler's
threads. An optional ``ResultStage`` sees every window result before fusion and may turn
it into others (the speaker biometrics: embeddings in, known_fraudster and
voice_mismatch scores out, the embedding consumed there).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from detectors.admission import Admission, AdmissionConfig, Decision
from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.bus.policy import Scope
from detectors.contract import Detector, WindowResult
from detectors.fusion import AlertPublisher, Fusion, Policy
from detectors.metrics import DetectorMetrics
from detectors.scheduler import BatchObserver, LaneConfig, Scheduler, lane_config
from detectors.windowing import FrameBank, LegInfo, UtteranceRule, WindowJob, WindowPlan
from native.ingest import PulledFrames


class ResultStage(Protocol):
    """Between the scheduler and fusion: window results in, the results fusion and the
    observers see out. Called from scheduler threads, concurrently."""

    def open_call(self, call_id: str, tenant: str = "default") -> None: ...

    def end_call(self, call_id: str) -> None: ...

    def process(self, result: WindowResult) -> tuple[WindowResult, ...]: ...


@runtime_checkable
class GatingStage(Protocol):
    """A stage that decides, per call, whether a detector runs at all: for a window it
    gates, the job becomes an abstention before the scheduler, so the model never sees
    the audio (e.g. the speaker model for a tenant whose ``biometrics_mode`` is off)."""

    def gate(self, detector: str, call_id: str) -> Abstention | None: ...


@runtime_checkable
class DrainingStage(Protocol):
    """A stage that may hold results back (e.g. until another detector's window over
    the same audio is known): at hang-up it hands them over, before fusion closes."""

    def drain(self, call_id: str) -> tuple[WindowResult, ...]: ...


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    workers: int = 2
    max_legs: int = 512
    ring_s: float = 12.0
    lanes: LaneConfig | dict[str, LaneConfig] | None = None
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    node_id: str = "node"
    # windows cut at utterance ends too (None: the hop grid only), and per dimension
    # the least time since the plan's last window for such a window to be cut. replay
    # takes every one, so synthetic_voice windows the replay stage holds for the
    # allowlist find the fingerprint over the same audio at once.
    utterances: UtteranceRule | None = field(default_factory=UtteranceRule)
    utterance_ends: tuple[tuple[Dimension, float], ...] = (
        (Dimension.SYNTHETIC_VOICE, 0.5),
        (Dimension.REPLAY, 0.0),
    )
    # extra windows the utterance ends cut, per hop-grid window, for admission's cost
    # estimate (measured on the g711 session eval, real speech: +14 % synthetic_voice,
    # +20 % since UtteranceRule.final_s: 4,688 scored genuine windows vs 3,922 grid-only)
    utterance_end_share: float = 0.20
    # pre-warm timing runs per shape and per lane with the pool full, seeding admission's
    # estimate before any call (detectors.prewarm_cost); 0: no seed, the estimate waits
    # for traffic (the ceiling alone until the first batch)
    prewarm_timing_reps: int = 3


class DetectorRuntime:
    def __init__(
        self,
        detectors: Sequence[Detector],
        publisher: AlertPublisher,
        *,
        config: RuntimeConfig = RuntimeConfig(),
        policy: Policy | None = None,
        metrics: DetectorMetrics | None = None,
        observer: BatchObserver | None = None,
        on_result: Callable[[WindowResult], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stage: ResultStage | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or DetectorMetrics()
        self._clock = clock
        self.bank = FrameBank(
            [d.spec.sample_rate for d in detectors], config.max_legs, config.ring_s
        )
        self.bank.utterances = config.utterances
        gaps = dict(config.utterance_ends) if config.utterances is not None else {}
        self.plans: list[WindowPlan] = [
            self.bank.plan(d.spec, gaps.get(d.spec.dimension)) for d in detectors
        ]
        self.fusion = Fusion(publisher, policy, config.node_id)
        self._lock = threading.Lock()
        self._on_result = on_result
        self.stage = stage
        extra = 1.0 + config.utterance_end_share
        demand = {
            d.spec.name: (extra if d.spec.dimension in gaps else 1.0) / d.spec.hop_s
            for d in detectors
        }
        # a lane runs at most max_inflight batches of its model at once: admission's
        # estimate must not count on more of the pool for one model than that
        inflight = {d.spec.name: lane_config(config.lanes, d).max_inflight for d in detectors}
        self.admission = Admission(
            replace(config.admission, workers=config.workers),
            demand,
            self.metrics,
            clock=clock,
            queue_age=lambda: self.scheduler.oldest_wait(),
            concurrency=inflight,
        )
        self._observer = observer

        def observe(name: str, size: int, run_s: float, waits: list[float], busy: int) -> None:
            self.admission.observe_batch(name, size, run_s, waits, busy)
            if self._observer is not None:
                self._observer(name, size, run_s, waits)

        self.scheduler = Scheduler(
            detectors,
            self._sink,
            bank=self.bank,
            workers=config.workers,
            config=config.lanes,
            metrics=self.metrics,
            load_observer=observe,
            clock=clock,
        )
        self._streams: dict[str, list[int]] = {}  # call id -> stream ids

    @property
    def ready(self) -> bool:
        return self.scheduler.ready

    def start(self) -> None:
        """Pre-warm (and time) every model and batch shape, seed admission's estimate
        from the timings, then run."""
        costs = self.scheduler.warm_up(self.config.prewarm_timing_reps)
        if costs is not None:
            self.admission.seed(costs)
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.close()

    # ---- calls and legs -------------------------------------------------------------

    def open_call(
        self,
        call_id: str,
        correlation_id: str | None = None,
        tenant: str = "default",
        scope: Scope | None = None,
    ) -> Decision:
        """``scope``: the call's tenant, queue and DNIS for the alert policy (default:
        ``tenant`` alone)."""
        decision = self.admission.admit(call_id)
        if decision.analysed:
            scope = scope or Scope(tenant)
            if self.stage is not None:
                self.stage.open_call(call_id, scope.tenant)
            with self._lock:
                self.fusion.open_call(call_id, correlation_id, scope)
                self._streams.setdefault(call_id, [])
        return decision

    def add_leg(
        self, call_id: str, stream_id: int, leg_id: str, role: LegRole, codec: str = "pcmu"
    ) -> None:
        """Register a leg of an analysed call (legs of other calls are ignored)."""
        if call_id not in self._streams:
            return
        self.bank.add_leg(stream_id, LegInfo(call_id, leg_id, role, codec))
        self._streams[call_id].append(stream_id)

    @property
    def policy(self) -> Policy:
        return self.fusion.policy

    def set_policy(self, policy: Policy) -> None:
        """Hot reload from any thread: a reference swap, no lock (see ``Fusion``)."""
        self.fusion.set_policy(policy)

    def set_scope(self, call_id: str, scope: Scope) -> None:
        with self._lock:
            self.fusion.set_scope(call_id, scope)

    def has_call(self, call_id: str) -> bool:
        """Whether the call is open and analysed here."""
        return call_id in self._streams

    def set_queue(self, call_id: str, queue: str) -> bool:
        """The call's queue, claimed mid-call: its alert policy is that queue's from the
        next window on. False: the call is not analysed here."""
        with self._lock:
            return self.fusion.set_queue(call_id, queue)

    def mark_early_media(self, call_id: str) -> None:
        """The call is not answered yet: its windows are scored but never alert."""
        with self._lock:
            self.fusion.mark_early_media(call_id, math.inf)

    def answered(self, call_id: str) -> None:
        """The call is answered now: windows starting before this point of its legs'
        media (the leg clocks the windows use) were early media."""
        with self._lock:
            until = 0.0
            for sid in self._streams.get(call_id, []):
                if sid in self.bank.legs():
                    until = max(until, self.bank.leg_samples(sid, 1000) / 1000)
            self.fusion.mark_early_media(call_id, until)

    def end_call(self, call_id: str) -> None:
        for sid in self._streams.pop(call_id, []):
            self.bank.remove_leg(sid)
        held: tuple[WindowResult, ...] = ()
        if isinstance(self.stage, DrainingStage):
            held = self.stage.drain(call_id)  # results a stage still holds
        with self._lock:
            for r in held:
                self.fusion.on_result(r)
            self.fusion.end_call(call_id)
        if self._on_result is not None:
            for r in held:
                self._on_result(r)
        if self.stage is not None:
            self.stage.end_call(call_id)
        self.admission.release(call_id)

    # ---- the tick -------------------------------------------------------------------

    def on_frames(self, pulled: PulledFrames) -> None:
        self.bank.push(pulled.ids, pulled.pcm, pulled.infos)
        now = self._clock()
        gate = self.stage if isinstance(self.stage, GatingStage) else None
        for plan in self.plans:
            jobs = plan.collect(now)
            if gate is not None:
                jobs = [_gated(gate, j) for j in jobs]
            if jobs:
                self.scheduler.submit(jobs)

    def signal(self, result: WindowResult) -> None:
        """A result no audio window produced (call metadata: the caller_id detector),
        from any thread: straight to fusion (not the per-window hook: it is no audio
        window, so no coverage)."""
        with self._lock:
            self.fusion.on_result(result)

    def _sink(self, result: WindowResult) -> None:
        results = (result,) if self.stage is None else self.stage.process(result)
        with self._lock:
            for r in results:
                self.fusion.on_result(r)
        if self._on_result is not None:
            for r in results:
                self._on_result(r)


def _gated(gate: GatingStage, job: WindowJob) -> WindowJob:
    if job.abstained is not None:
        return job
    why = gate.gate(job.detector, job.key.call_id)
    return job if why is None else replace(job, abstained=why, ring=None)
