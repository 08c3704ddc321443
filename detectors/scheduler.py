"""The scheduler: micro-batches windows of many calls per detector, with a deadline, on a
bounded thread pool; a failing, hanging or late detector yields ``unavailable`` for its
windows and nothing else stalls (DESIGN §3).

Per detector a lane holds a queue. The dispatcher thread starts a batch when the lane
has ``max_batch`` windows, its oldest has waited ``max_wait_s`` or an ``urgent`` window
(one cut at an utterance end, whose score an alert may wait on) is queued, and the lane
has fewer than ``max_inflight`` batches running; a batch takes the oldest windows, but
with more queued than one batch holds, the urgent ones first. A worker copies each
window once, from the frame bank's ring into a preallocated batch tensor, runs the
detector (ONNX Runtime releases the GIL) and hands one ``WindowResult`` per window to
the sink. Pre-warm runs every batch shape once and, asked to, times them alone and with
the pool full (``detectors.prewarm_cost``: admission's seed).

Isolation: a window still queued at its deadline (``ready_at + deadline_s``) is
unavailable (``deadline``); a batch running past its deadline is settled unavailable by
the dispatcher's watchdog (``overrun``) and its late answer discarded; a raise makes the
batch unavailable (``error``); audio overwritten in the ring is ``stale``. A hung
detector keeps only its own lane's slots, so its queue expires while the others run.

The sink is called from worker threads and the dispatcher: it must be thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from detectors.alert_schema import Abstention
from detectors.contract import BatchOutput, Detector, FloatArray, WindowResult
from detectors.metrics import DetectorMetrics
from detectors.prewarm_cost import PrewarmCosts, TimedLane, measure
from detectors.windowing import FrameBank, WindowJob

log = logging.getLogger(__name__)

Sink = Callable[[WindowResult], None]
BatchObserver = Callable[[str, int, float, list[float]], None]  # name, size, run s, waits
# as BatchObserver, plus the most batches the pool ran at once during this one (itself
# included): admission tells a quiet pool's cost from a full pool's by it
LoadObserver = Callable[[str, int, float, list[float], int], None]


@dataclass(frozen=True, slots=True)
class LaneConfig:
    max_batch: int = 8
    max_wait_s: float = 0.05
    deadline_s: float = 2.0
    max_inflight: int = 1

    def warm_sizes(self) -> tuple[int, ...]:
        sizes, b = [], 1
        while b < self.max_batch:
            sizes.append(b)
            b *= 2
        return (*sizes, self.max_batch)


def lane_config(config: LaneConfig | dict[str, LaneConfig] | None, d: Detector) -> LaneConfig:
    """The lane a detector gets from a scheduler's ``config`` (one for all, or per
    detector name; a detector that cannot batch gets batches of one)."""
    cfg = config.get(d.spec.name, LaneConfig()) if isinstance(config, dict) else config
    cfg = cfg or LaneConfig()
    if not d.spec.batchable:
        cfg = LaneConfig(1, cfg.max_wait_s, cfg.deadline_s, cfg.max_inflight)
    return cfg


@dataclass(slots=True)
class _Batch:
    lane: _Lane
    jobs: list[WindowJob]
    started: float
    deadline: float
    settled: bool = False
    pool_peak: int = 0  # the most batches running on the pool at once during this one
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class _Lane:
    detector: Detector
    config: LaneConfig
    queue: deque[WindowJob] = field(default_factory=deque)
    inflight: list[_Batch] = field(default_factory=list)
    buffers: list[FloatArray] = field(default_factory=list)
    errors_logged: set[str] = field(default_factory=set)
    urgent: int = 0  # urgent windows queued

    @property
    def name(self) -> str:
        return self.detector.spec.name


def _take(lane: _Lane) -> list[WindowJob]:
    """The next batch's windows off the lane's queue (under the lock): the oldest, but
    with more queued than a batch holds, the urgent (utterance-end) windows first, so a
    backlog delays least the windows an alert waits on. The rest keep their order."""
    q, n = lane.queue, lane.config.max_batch
    taken: list[WindowJob] = []
    if lane.urgent > 0 and len(q) > n:
        kept: deque[WindowJob] = deque()
        for job in q:
            (taken if job.urgent and len(taken) < n else kept).append(job)
        q.clear()
        q.extend(kept)
    while q and len(taken) < n:
        taken.append(q.popleft())
    lane.urgent -= sum(job.urgent for job in taken)
    return taken


class Scheduler:
    def __init__(
        self,
        detectors: Sequence[Detector],
        sink: Sink,
        *,
        bank: FrameBank | None = None,
        workers: int = 2,
        config: LaneConfig | dict[str, LaneConfig] | None = None,
        metrics: DetectorMetrics | None = None,
        observer: BatchObserver | None = None,
        load_observer: LoadObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink, self._bank, self._clock = sink, bank, clock
        self.metrics = metrics or DetectorMetrics()
        self._observer = observer
        self._load_observer = load_observer
        self._workers = workers
        self._running: list[_Batch] = []  # batches inside run_batch now, every lane
        self.prewarm: PrewarmCosts | None = None
        self._lanes: dict[str, _Lane] = {}
        for d in detectors:
            cfg = lane_config(config, d)
            lane = _Lane(d, cfg)
            lane.buffers = [
                np.zeros((cfg.max_batch, d.spec.window), np.float32)
                for _ in range(cfg.max_inflight)
            ]
            self._lanes[d.spec.name] = lane
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="detector")
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self.ready = False

    def lane_configs(self) -> dict[str, LaneConfig]:
        """Each detector's lane as the scheduler runs it."""
        return {name: lane.config for name, lane in self._lanes.items()}

    # ---- lifecycle ------------------------------------------------------------------

    def warm_up(self, timing_reps: int = 0) -> PrewarmCosts | None:
        """Run every detector once per batch shape; with ``timing_reps``, then time each
        shape alone and every lane's full batch with the whole pool busy
        (``detectors.prewarm_cost``, kept in ``prewarm``); then the scheduler is ready.
        Run it before ``start``: the timing needs the pool's cores to itself."""
        for lane in self._lanes.values():
            lane.detector.warm_up(lane.config.warm_sizes())
        if timing_reps > 0:
            timed = [
                TimedLane(lane.detector, lane.config.warm_sizes(), lane.config.max_inflight)
                for lane in self._lanes.values()
            ]
            self.prewarm = measure(timed, self._workers, timing_reps)
        self.ready = True
        self.metrics.ready.set(1)
        return self.prewarm

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dispatcher", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Run what is queued, then stop (a hung detector is not waited for)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- intake ---------------------------------------------------------------------

    def submit(self, jobs: Iterable[WindowJob]) -> None:
        queued = False
        for job in jobs:
            if job.abstained is not None:
                self._emit_abstained(job, job.abstained)
                continue
            lane = self._lanes[job.detector]
            with self._cond:
                lane.queue.append(job)
                lane.urgent += job.urgent
            queued = True
        if queued:
            with self._cond:
                self._cond.notify()

    def queue_depths(self) -> dict[str, int]:
        with self._cond:
            return {name: len(lane.queue) for name, lane in self._lanes.items()}

    def oldest_wait(self) -> float:
        """How long the oldest window queued now has waited, s (0: nothing queued)."""
        now = self._clock()
        with self._cond:
            ready = [lane.queue[0].ready_at for lane in self._lanes.values() if lane.queue]
        return max(0.0, now - min(ready)) if ready else 0.0

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no window is queued or running, so every window submitted so far
        has reached the sink; False on timeout. For offline drivers that advance a
        virtual clock only once the windows so far are settled (``callshield replay``)."""
        end = time.monotonic() + timeout
        with self._cond:
            while any(lane.queue or lane.inflight for lane in self._lanes.values()):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.002))  # workers notify one waiter only
        return True

    # ---- the dispatcher -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            expired: list[tuple[WindowJob, str]] = []
            overrun: list[_Batch] = []
            start: list[_Batch] = []
            with self._cond:
                now = self._clock()
                wake = now + 0.5
                for lane in self._lanes.values():
                    wake = min(wake, self._plan_lane(lane, now, expired, overrun, start))
                    self.metrics.queue_depth.labels(lane.name).set(len(lane.queue))
                idle = not any(lane.queue or lane.inflight for lane in self._lanes.values())
                if self._closing and idle:
                    return
                if not (expired or overrun or start):
                    self._cond.wait(max(0.0, wake - now))
                    continue
            for job, reason in expired:
                self._emit_unavailable(job, reason)
            for batch in overrun:
                self._settle_unavailable(batch, "overrun")
            for batch in start:
                self._pool.submit(self._execute, batch)

    def _plan_lane(
        self,
        lane: _Lane,
        now: float,
        expired: list[tuple[WindowJob, str]],
        overrun: list[_Batch],
        start: list[_Batch],
    ) -> float:
        """Expire, watch and start batches of one lane (under the lock); returns when
        this lane next needs the dispatcher."""
        cfg, q = lane.config, lane.queue
        wake = now + 0.5
        for batch in lane.inflight:
            if not batch.settled and now >= batch.deadline:
                overrun.append(batch)
            elif not batch.settled:
                wake = min(wake, batch.deadline)
        while q and q[0].ready_at + cfg.deadline_s <= now:
            job = q.popleft()
            lane.urgent -= job.urgent
            expired.append((job, "deadline"))
        if q and len(lane.inflight) < cfg.max_inflight:
            oldest = q[0].ready_at
            full = len(q) >= cfg.max_batch or lane.urgent > 0
            if full or now - oldest >= cfg.max_wait_s or self._closing:
                jobs: list[WindowJob] = []
                for job in _take(lane):
                    if self._bank is not None and not self._bank.fresh(job):
                        expired.append((job, "stale"))
                    else:
                        jobs.append(job)
                if jobs:
                    deadline = min(j.ready_at for j in jobs) + cfg.deadline_s
                    batch = _Batch(lane, jobs, now, deadline)
                    lane.inflight.append(batch)
                    start.append(batch)
            else:
                wake = min(wake, oldest + cfg.max_wait_s)
        if q:
            wake = min(wake, q[0].ready_at + cfg.deadline_s)
        return wake

    # ---- the worker -----------------------------------------------------------------

    def _execute(self, batch: _Batch) -> None:
        lane = batch.lane
        with self._cond:
            buf = lane.buffers.pop()
            self._running.append(batch)
            for running in self._running:
                running.pool_peak = max(running.pool_peak, len(self._running))
        try:
            b = len(batch.jobs)
            for i, job in enumerate(batch.jobs):
                job.read_into(buf[i])
            t0 = time.perf_counter()
            output: BatchOutput | None = None
            error = ""
            try:
                output = lane.detector.run_batch(buf[:b])
                if output.scores.shape[0] != b:
                    raise ValueError(f"{b} windows in, {output.scores.shape[0]} scores out")
            except Exception as exc:  # isolation: any detector failure is "unavailable"
                error = type(exc).__name__
                if error not in lane.errors_logged:
                    lane.errors_logged.add(error)
                    log.warning("detector %s failed (%s: %s)", lane.name, error, exc)
            run_s = time.perf_counter() - t0
            with self._cond:
                self._running.remove(batch)
            if output is None:
                self._settle_unavailable(batch, "error")
            else:
                self._settle_scored(batch, output, run_s)
        finally:
            with self._cond:
                lane.buffers.append(buf)
                lane.inflight.remove(batch)
                if batch in self._running:  # a raise before run_batch returned
                    self._running.remove(batch)
                self._cond.notify()

    def _settle_scored(self, batch: _Batch, output: BatchOutput, run_s: float) -> None:
        lane = batch.lane
        spec = lane.detector.spec
        provider = lane.detector.provider
        with batch.lock:
            if batch.settled:
                return  # the watchdog already reported these windows unavailable
            batch.settled = True
        b = len(batch.jobs)
        waits = [batch.started - j.ready_at for j in batch.jobs]
        m = self.metrics
        m.batch_seconds.labels(spec.name, provider).observe(run_s)
        m.window_seconds.labels(spec.name, provider).observe(run_s / b)
        m.batch_size.labels(spec.name).observe(b)
        for w in waits:
            m.queue_wait.labels(spec.name).observe(w)
        if self._observer is not None:
            self._observer(spec.name, b, run_s, waits)
        if self._load_observer is not None:
            self._load_observer(spec.name, b, run_s, waits, batch.pool_peak)
        for i, job in enumerate(batch.jobs):
            abst = output.abstentions[i] if output.abstentions else None
            emb = output.embeddings[i] if output.embeddings is not None else None
            score = None if abst is not None else float(output.scores[i])
            m.windows.labels(spec.name, abst.value if abst else "scored").inc()
            self._sink(
                WindowResult(
                    key=job.key,
                    detector=spec.name,
                    model_version=spec.version,
                    dimension=spec.dimension,
                    provider=provider,
                    score=score,
                    threshold=spec.threshold,
                    abstained=abst,
                    quality=job.quality,
                    embedding=emb,
                    queue_wait_s=waits[i],
                    ready_at=job.ready_at,
                )
            )

    def _settle_unavailable(self, batch: _Batch, reason: str) -> None:
        with batch.lock:
            if batch.settled:
                return
            batch.settled = True
        if reason == "overrun":
            log.warning("detector %s overran its deadline", batch.lane.name)
        for job in batch.jobs:
            self._emit_unavailable(job, reason)

    def _emit_unavailable(self, job: WindowJob, reason: str) -> None:
        self.metrics.unavailable.labels(job.detector, reason).inc()
        self._emit_abstained(job, Abstention.UNAVAILABLE, (f"unavailable: {reason}",))

    def _emit_abstained(
        self, job: WindowJob, reason: Abstention, reasons: tuple[str, ...] = ()
    ) -> None:
        lane = self._lanes[job.detector]
        spec = lane.detector.spec
        self.metrics.windows.labels(spec.name, reason.value).inc()
        self._sink(
            WindowResult(
                key=job.key,
                detector=spec.name,
                model_version=spec.version,
                dimension=spec.dimension,
                provider=lane.detector.provider,
                score=None,
                threshold=spec.threshold,
                abstained=reason,
                quality=job.quality,
                reasons=reasons,
                ready_at=job.ready_at,
            )
        )
