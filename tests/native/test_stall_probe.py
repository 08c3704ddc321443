"""The stall probe (native/src/stall_probe.h), the latency baseline of ``bench ingest``:
it records one sample per step of every batch, each at least its share of the batch's
work, starts no catch-up burst when started late, and refuses bad settings. No timing
goals here (DESIGN.md §10): the work per step is only checked to be done."""

from __future__ import annotations

import time

import pytest

from native import stall_probe

MS = 1_000_000


def test_one_sample_per_step_each_after_its_work() -> None:
    start = time.monotonic_ns() + 20 * MS
    r = stall_probe.run(start, start + 300 * MS, 2 * MS, 8, 2_000)
    h = r.histogram
    assert h.count % 8 == 0 and 0 < h.count // 8 <= 151  # one batch per 2 ms at most
    assert h.negative == 0
    # step k of a batch ends after k + 1 steps of ~2 µs: a mean near 4.5 x 2 µs, the
    # first step's sample at least about one step (calibrated to the fastest of five runs)
    assert h.sum_ns / h.count >= 0.5 * 4.5 * 2_000
    assert h.percentile_ns(1) >= 1_000
    assert 0 < r.cpu_ns < 300 * MS and r.unit_iters > 0
    # one wakeup per batch, each costing some CPU, all of it within the thread's total
    assert r.batches == h.count // 8
    assert 0 < r.wake_cpu_ns < r.cpu_ns
    assert r.wake_cpu_us == r.wake_cpu_ns / r.batches / 1e3


def test_the_wakeups_cost_is_the_sleeps_not_the_work() -> None:
    """Ten times the work per batch leaves the CPU counted to the wakeups where it was
    (it is measured from each sleep's call to its batch's start) and puts the rest in the
    batches: the wakeup share of the thread's CPU falls."""
    start = time.monotonic_ns() + 10 * MS
    light = stall_probe.run(start, start + 200 * MS, 2 * MS, 4, 1_000)
    start = time.monotonic_ns() + 10 * MS
    heavy = stall_probe.run(start, start + 200 * MS, 2 * MS, 40, 1_000)
    assert light.batches > 0 and heavy.batches > 0
    assert light.wake_cpu_ns / light.cpu_ns > heavy.wake_cpu_ns / heavy.cpu_ns
    # the work itself (~40 µs a batch) is outside the wakeup figure
    assert heavy.cpu_ns - heavy.wake_cpu_ns >= 0.5 * heavy.batches * 40 * 1_000


def test_no_batch_no_wakeup_cost() -> None:
    now = time.monotonic_ns()
    r = stall_probe.run(now - 10 * MS, now - 5 * MS, MS, 4, 500)  # a window already over
    assert (r.histogram.count, r.batches, r.wake_cpu_ns, r.wake_cpu_us) == (0, 0, 0, None)


def test_a_late_start_does_not_burst_to_catch_up() -> None:
    now = time.monotonic_ns()
    r = stall_probe.run(now - 500 * MS, now + 100 * MS, 10 * MS, 3, 500, offset_ns=5 * MS)
    # 500 ms in the past: only the grid points from now on run (at most 11 in 100 ms)
    assert 0 < r.histogram.count <= 11 * 3


def test_calibration_scales_with_the_step() -> None:
    small, large = stall_probe.calibrate(1_000), stall_probe.calibrate(100_000)
    assert 0 < small < large
    assert stall_probe.calibrate(0) == 1


@pytest.mark.parametrize(
    ("period", "units", "offset", "span"),
    [(0, 4, 0, 1), (MS, 0, 0, 1), (MS, 4, MS, 1), (MS, 4, -1, 1), (MS, 4, 0, -1)],
)
def test_bad_settings_are_refused(period: int, units: int, offset: int, span: int) -> None:
    now = time.monotonic_ns()
    with pytest.raises(ValueError, match="bad stall probe settings"):
        stall_probe.run(now, now + span * MS, period, units, 500, offset_ns=offset)
