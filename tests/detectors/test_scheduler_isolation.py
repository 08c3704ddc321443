"""The scheduler: micro-batches across calls, and a detector that raises, hangs or
overruns yields `unavailable` for its windows while the others go on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from conftest import Built, voice_like

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.contract import BatchOutput, DetectorSpec, FloatArray, WindowResult
from detectors.onnx_detector import OnnxDetector
from detectors.scheduler import LaneConfig, Scheduler
from detectors.windowing import FrameBank, LegInfo, WindowJob, frames_from_pcm


class FakeDetector:
    """Mean absolute amplitude as the score; can raise or block on an event."""

    def __init__(self, name: str, mode: str = "ok", window: int = 8000) -> None:
        self._spec = DetectorSpec(
            name, "1", Dimension.SYNTHETIC_VOICE, 8000, window, window, min_net_speech_s=0.0
        )
        self.mode = mode
        self.release = threading.Event()
        self.calls: list[int] = []

    @property
    def spec(self) -> DetectorSpec:
        return self._spec

    @property
    def provider(self) -> str:
        return "numpy"

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        self.calls.append(audio.shape[0])
        if self.mode == "raise":
            raise RuntimeError("model exploded")
        if self.mode == "hang":
            self.release.wait(30)
        return BatchOutput(np.abs(audio).mean(axis=1).astype(np.float32))

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        for b in batch_sizes:
            self.run_batch(np.zeros((b, self._spec.window), np.float32))


class Collector:
    def __init__(self) -> None:
        self.results: list[WindowResult] = []
        self.lock = threading.Lock()

    def __call__(self, r: WindowResult) -> None:
        with self.lock:
            self.results.append(r)

    def by(self, detector: str) -> list[WindowResult]:
        with self.lock:
            return [r for r in self.results if r.detector == detector]

    def wait(self, pred: Callable[[], bool], timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                raise AssertionError(f"timed out; have {len(self.results)} results")
            time.sleep(0.005)


def _jobs(
    bank: FrameBank, specs: list[DetectorSpec], legs: int, seconds: float = 1.0, first: int = 100
) -> list[WindowJob]:
    plans = [bank.plan(s) for s in specs]
    ids = np.arange(legs, dtype=np.int32) + first
    for i in ids:
        bank.add_leg(int(i), LegInfo(f"call{i}", "caller", LegRole.EXTERNAL))
    pcm = np.stack([voice_like(seconds, seed=int(i)) for i in ids])
    jobs: list[WindowJob] = []
    for f in range(pcm.shape[1] // 160):
        frame = np.ascontiguousarray(pcm[:, f * 160 : (f + 1) * 160])
        bank.push(ids, frame, frames_from_pcm(frame))
        now = time.monotonic()
        for p in plans:
            jobs += p.collect(now)
    return jobs


def test_windows_of_many_calls_share_a_batch_and_scores_match() -> None:
    det = FakeDetector("fake")
    bank = FrameBank([8000], max_legs=16, ring_s=3.0)
    out = Collector()
    sizes: list[int] = []
    sched = Scheduler(
        [det],
        out,
        bank=bank,
        workers=2,
        config=LaneConfig(max_batch=4, max_wait_s=0.02, deadline_s=10.0),
        observer=lambda name, b, s, w: sizes.append(b),
    )
    sched.start()
    try:
        jobs = _jobs(bank, [det.spec], legs=6)
        sched.submit(jobs)
        out.wait(lambda: len(out.results) == 6)
    finally:
        sched.close()
    assert sorted(sizes) == [2, 4]
    for r in out.results:
        assert r.abstained is None and r.score is not None
        assert r.key.end_s == 1.0 and r.quality.net_speech_s > 0.5
    # the batched score equals the window scored alone
    x = np.empty((1, 8000), np.float32)
    for job, r in zip(jobs, sorted(out.results, key=lambda r: r.key.call_id), strict=True):
        job.read_into(x[0])
        assert r.score == pytest.approx(float(np.abs(x).mean()), rel=1e-6)


def test_a_raising_detector_is_unavailable_and_the_others_go_on() -> None:
    good, bad = FakeDetector("good"), FakeDetector("bad", "raise")
    bank = FrameBank([8000], max_legs=8, ring_s=3.0)
    out = Collector()
    sched = Scheduler(
        [good, bad],
        out,
        bank=bank,
        workers=2,
        config=LaneConfig(max_batch=8, max_wait_s=0.01, deadline_s=10.0),
    )
    sched.start()
    try:
        sched.submit(_jobs(bank, [good.spec, bad.spec], legs=3))
        out.wait(lambda: len(out.results) == 6)
    finally:
        sched.close()
    assert all(r.score is not None for r in out.by("good"))
    assert all(r.abstained is Abstention.UNAVAILABLE for r in out.by("bad"))
    assert all(r.reasons == ("unavailable: error",) for r in out.by("bad"))
    m = sched.metrics.unavailable.labels("bad", "error")._value.get()
    assert m == 3


def test_a_hung_detector_overruns_and_expires_while_others_score() -> None:
    good, hung = FakeDetector("good"), FakeDetector("hung", "hang")
    bank = FrameBank([8000], max_legs=8, ring_s=6.0)
    out = Collector()
    sched = Scheduler(
        [good, hung],
        out,
        bank=bank,
        workers=3,
        config=LaneConfig(max_batch=2, max_wait_s=0.01, deadline_s=0.3),
    )
    sched.start()
    try:
        jobs = _jobs(bank, [good.spec, hung.spec], legs=4)
        sched.submit(jobs)  # hung: first batch of 2 hangs, the other 2 wait then expire
        out.wait(lambda: len(out.by("hung")) == 4 and len(out.by("good")) == 4)
        reasons = sorted(r.reasons[0] for r in out.by("hung"))
        assert reasons == ["unavailable: deadline"] * 2 + ["unavailable: overrun"] * 2
        assert all(r.score is not None for r in out.by("good"))
        # more windows for the good lane are still scored while "hung" hangs
        more = _jobs(bank, [good.spec], legs=2, first=200)
        sched.submit(more)
        new = ("call200", "call201")
        out.wait(lambda: sum(r.key.call_id in new for r in out.by("good")) == 2)
        assert all(r.score is not None for r in out.by("good") if r.key.call_id in new)
    finally:
        hung.release.set()
        sched.close()
    time.sleep(0.05)
    assert len(out.by("hung")) == 4  # the late answer was discarded, not delivered twice


def test_abstained_windows_pass_through_without_inference() -> None:
    det = FakeDetector("fake")
    bank = FrameBank([8000], max_legs=2, ring_s=3.0)
    out = Collector()
    sched = Scheduler([det], out, bank=bank)
    bank.add_leg(1, LegInfo("c", "l", LegRole.UNKNOWN))
    plan = bank.plan(det.spec)
    pcm = voice_like(1.0)[None, :]
    for f in range(50):
        frame = np.ascontiguousarray(pcm[:, f * 160 : (f + 1) * 160])
        bank.push(np.array([1], np.int32), frame, frames_from_pcm(frame))
    sched.submit(plan.collect(0.0))
    assert [r.abstained for r in out.results] == [Abstention.LEG_UNKNOWN]
    assert det.calls == []


def test_onnx_lane_end_to_end_and_warm_up(
    tiny_aasist: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(tiny_aasist)
    bank = FrameBank([16000], max_legs=8, ring_s=3.0)
    out = Collector()
    sched = Scheduler([det], out, bank=bank, config=LaneConfig(max_batch=4, max_wait_s=0.01))
    assert not sched.ready
    sched.warm_up()
    assert sched.ready and sched.metrics.ready._value.get() == 1
    sched.start()
    try:
        sched.submit(_jobs(bank, [det.spec], legs=5, seconds=0.6))
        out.wait(lambda: len(out.results) == 5)
    finally:
        sched.close()
    assert all(r.provider == "cpu" and r.score is not None for r in out.results)
