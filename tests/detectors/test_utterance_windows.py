"""Windows cut at utterance ends (DESIGN §5): when a leg's speech stops, a window ending
at its last voiced frame is cut within the hangover, marked urgent, and the hop grid
restarts from it; the scheduler runs urgent windows without waiting to fill a batch."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from conftest import voice_like
from test_scheduler_isolation import Collector, FakeDetector

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.scheduler import LaneConfig, Scheduler
from detectors.windowing import FrameBank, LegInfo, UtteranceRule, WindowJob, frames_from_pcm

RULE = UtteranceRule(hangover_s=0.1, min_apart_s=0.5)
HANG = RULE.hangover_frames


def _spec() -> DetectorSpec:
    # 2 s window, 1 s hop at 8 kHz
    return DetectorSpec("sv", "1", Dimension.SYNTHETIC_VOICE, 8000, 16000, 8000, 0.2)


def _run(
    pcm: npt.NDArray[np.int16], rule: UtteranceRule | None, gap: float | None = 0.5
) -> list[tuple[int, WindowJob]]:
    """(frame index at which it was cut, window) for one external leg."""
    bank = FrameBank([8000], max_legs=2, ring_s=6.0)
    bank.utterances = rule
    bank.add_leg(1, LegInfo("c", "caller", LegRole.EXTERNAL))
    plan = bank.plan(_spec(), gap)
    seen = []
    for f in range(pcm.size // 160):
        frame = np.ascontiguousarray(pcm[None, f * 160 : (f + 1) * 160])
        bank.push(np.array([1], np.int32), frame, frames_from_pcm(frame))
        seen += [(f, j) for j in plan.collect(0.0)]
    return seen


def _talk(*spans: tuple[float, float]) -> npt.NDArray[np.int16]:
    """Speech energy over ``spans`` (seconds), silence elsewhere, 8 s in all."""
    out = np.zeros(8 * 8000, np.int16)
    for k, (a, b) in enumerate(spans):
        i, j = round(a * 8000), round(b * 8000)
        out[i:j] = voice_like(8.0, seed=k)[: j - i]
    return out


def test_an_utterance_end_cuts_a_window_ending_there_and_the_grid_restarts() -> None:
    pcm = _talk((0.0, 4.5))
    seen = _run(pcm, RULE)
    ends = [round(j.key.end_s, 2) for _, j in seen]
    # grid at 2, 3, 4; the utterance ends at 4.5; the grid then goes on from 4.5 + 1
    assert ends == [2.0, 3.0, 4.0, 4.5, 5.5, 6.5, 7.5], ends
    frame, job = next((f, j) for f, j in seen if round(j.key.end_s, 2) == 4.5)
    assert job.urgent and job.abstained is None
    assert frame == int(4.5 / 0.02) - 1 + HANG  # cut once the hangover has passed
    out = np.empty(16000, np.float32)
    job.read_into(out)
    np.testing.assert_allclose(out, pcm[20000:36000] / 32768, atol=1e-6)
    assert not any(j.urgent for _, j in seen if j is not job)


def test_without_the_rule_only_the_grid_cuts() -> None:
    pcm = _talk((0.0, 4.5))
    assert [round(j.key.end_s, 2) for _, j in _run(pcm, None)] == [
        2.0,
        3.0,
        4.0,
        5.0,
        6.0,
        7.0,
        8.0,
    ]
    # a plan made without end_gap ignores the bank's utterance ends
    plain = [round(j.key.end_s, 2) for _, j in _run(pcm, RULE, gap=None)]
    assert plain == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_short_pauses_ends_too_close_and_ends_near_a_window_cut_nothing() -> None:
    # a 60 ms pause (shorter than the hangover) inside speech is no utterance end
    pcm = _talk((0.0, 2.5), (2.56, 4.5))
    ends = [round(j.key.end_s, 2) for _, j in _run(pcm, RULE)]
    assert 2.5 not in ends and 4.5 in ends, ends
    # an end 0.2 s after a grid window (under the plan's 0.5 s gap): no extra window
    pcm = _talk((0.0, 4.2))
    seen = _run(pcm, RULE)
    assert not any(j.urgent for _, j in seen)
    assert [round(j.key.end_s, 2) for _, j in seen][:4] == [2.0, 3.0, 4.0, 5.0]
    # two ends 0.3 s apart (under the rule's 0.5 s): without final_s the second is not
    # an utterance end
    pcm = _talk((0.0, 3.5), (3.62, 3.8))
    plain = UtteranceRule(hangover_s=0.1, min_apart_s=0.5, final_s=None)
    urgent = [round(j.key.end_s, 2) for _, j in _run(pcm, plain) if j.urgent]
    assert urgent == [3.5], urgent


def test_a_pause_noted_as_an_end_does_not_hide_the_real_end() -> None:
    # speech to 2.1 s, a 0.2 s pause (an end: over the hangover, but only 0.1 s after
    # the grid window at 2.0, so no window is cut there), speech again to 3.5 s, then
    # silence: the real end comes 1.4 s after the pause, inside min_apart_s (1.5 s)
    pcm = _talk((0.0, 2.1), (2.3, 3.5))
    rule = UtteranceRule()  # the runtime's: 0.1 s hangover, 1.5 s apart, final 0.25 s
    seen = _run(pcm, rule)
    ends = [round(j.key.end_s, 2) for _, j in seen]
    # the real end gets its window once 0.25 s of silence followed it; the grid restarts
    assert ends[:5] == [2.0, 3.0, 3.5, 4.5, 5.5], ends
    frame, job = next((f, j) for f, j in seen if round(j.key.end_s, 2) == 3.5)
    assert job.urgent and job.abstained is None
    assert rule.final_frames is not None
    assert frame == int(3.5 / 0.02) - 1 + rule.final_frames
    # without final_s the pause's end hides the real one: its last words wait for the grid
    plain = UtteranceRule(final_s=None)
    assert not any(j.urgent for _, j in _run(pcm, plain))


def test_final_s_under_the_hangover_is_refused() -> None:
    with pytest.raises(ValueError, match="final_s"):
        UtteranceRule(hangover_s=0.3, final_s=0.2)


def test_an_urgent_window_runs_without_waiting_for_a_batch() -> None:
    det = FakeDetector("sv")
    sink = Collector()
    # a clock that never moves: a window that is not urgent never reaches max_wait_s
    sched = Scheduler(
        [det], sink, config=LaneConfig(max_batch=8, max_wait_s=5.0), clock=lambda: 0.0
    )
    sched.warm_up()
    det.calls.clear()
    sched.start()
    try:
        bank = FrameBank([8000], max_legs=4, ring_s=4.0)
        for sid in (1, 2):
            bank.add_leg(sid, LegInfo(f"c{sid}", "caller", LegRole.EXTERNAL))
        plan = bank.plan(det.spec)
        pcm = np.stack([voice_like(1.0, seed=s) for s in (1, 2)])
        for f in range(50):
            frame = np.ascontiguousarray(pcm[:, f * 160 : (f + 1) * 160])
            bank.push(np.array([1, 2], np.int32), frame, frames_from_pcm(frame))
        first, second = plan.collect(0.0)
        sched.submit([first])
        assert not sched.wait_idle(timeout=0.3)  # queued, waiting for a batch to fill
        assert det.calls == [] and sink.results == []
        from dataclasses import replace

        sched.submit([replace(second, urgent=True)])
        assert sched.wait_idle(timeout=10.0)
        assert det.calls == [2]  # both went in one batch, at once
        assert {r.key.call_id for r in sink.results} == {"c1", "c2"}
    finally:
        sched.close()
