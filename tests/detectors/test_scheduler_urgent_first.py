"""The scheduler under a backlog: a lane's urgent (utterance-end) windows go into the
next batch ahead of older grid windows, and every batch reports how many batches the
pool ran at once during it (admission scales a quiet pool's cost by it)."""

from __future__ import annotations

import dataclasses

from test_scheduler_isolation import Collector, FakeDetector, _jobs

from detectors.scheduler import LaneConfig, Scheduler
from detectors.windowing import FrameBank


def test_urgent_windows_go_ahead_of_older_grid_windows() -> None:
    det = FakeDetector("fake")
    bank = FrameBank([8000], max_legs=16, ring_s=3.0)
    out = Collector()
    sched = Scheduler(
        [det],
        out,
        bank=bank,
        workers=1,
        config=LaneConfig(max_batch=4, max_wait_s=0.0, deadline_s=30.0, max_inflight=1),
    )
    jobs = _jobs(bank, [det.spec], legs=10)  # one 1 s window per leg, in leg order
    assert len(jobs) == 10
    jobs[7] = dataclasses.replace(jobs[7], urgent=True)  # cut at utterance ends, last
    jobs[9] = dataclasses.replace(jobs[9], urgent=True)
    sched.submit(jobs)  # the backlog is queued before the dispatcher runs
    sched.start()
    try:
        out.wait(lambda: len(out.results) == 10)
    finally:
        sched.close()
    assert det.calls == [4, 4, 2]  # three batches, one at a time
    calls = [r.key.call_id for r in out.results]
    first = set(calls[:4])  # one batch at a time: the first batch's results come first
    assert {jobs[7].key.call_id, jobs[9].key.call_id} <= first
    assert first - {jobs[7].key.call_id, jobs[9].key.call_id} == {
        jobs[0].key.call_id,
        jobs[1].key.call_id,
    }  # then the oldest grid windows, in order
    assert calls[4:8] == [jobs[i].key.call_id for i in (2, 3, 4, 5)]
    assert all(r.score is not None for r in out.results)


def test_each_batch_reports_how_many_batches_the_pool_ran_at_once() -> None:
    a, b = FakeDetector("a", mode="hang"), FakeDetector("b", mode="hang")
    bank = FrameBank([8000], max_legs=16, ring_s=3.0)
    out = Collector()
    peaks: list[tuple[str, int]] = []
    sched = Scheduler(
        [a, b],
        out,
        bank=bank,
        workers=2,
        config=LaneConfig(max_batch=1, max_wait_s=0.0, deadline_s=30.0),
        load_observer=lambda name, size, run_s, waits, busy: peaks.append((name, busy)),
    )
    sched.start()
    try:
        jobs = _jobs(bank, [a.spec, b.spec], legs=1)
        sched.submit(jobs)  # one window each: both batches block inside run_batch
        out.wait(lambda: len(a.calls) == 1 and len(b.calls) == 1)
        a.release.set()
        b.release.set()
        out.wait(lambda: len(out.results) == 2)
        sched.submit(_jobs(bank, [a.spec], legs=1, first=200))  # alone on the pool
        out.wait(lambda: len(out.results) == 3)
    finally:
        sched.close()
    assert sorted(peaks[:2]) == [("a", 2), ("b", 2)]
    assert peaks[2] == ("a", 1)
