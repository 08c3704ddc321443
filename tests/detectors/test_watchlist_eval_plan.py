"""How ``callshield eval --watchlist-sizes`` cuts a speaker's utterances into an enrolment,
a hit-probe call and impostor calls by net speech, and which watchlist entries count as
the target's own voice (pure logic; the end-to-end run is in test_watchlist_bridge.py)."""

from __future__ import annotations

import numpy as np
import pytest

from detectors.eval.watchlist import (
    accounted_speech,
    own_voice,
    plan_speaker,
    take,
    without_own_voice,
)
from detectors.speaker.scoring import Cohort, l2_normalise
from detectors.speaker.watchlist_index import WatchlistIndex

NETS = [2.0, 1.8, 2.5, 3.0, 1.0]  # net speech per utterance


def summed(idx: list[int]) -> float:
    return sum(NETS[i] for i in idx)


def test_take_stops_at_the_first_utterance_that_reaches_the_need() -> None:
    assert take(5, 0, 3.0, summed) == ([0, 1], 2)
    assert take(5, 2, 2.5, summed) == ([2], 3)
    assert take(5, 3, 4.5, summed) is None  # 3.0 + 1.0 falls short


def test_plan_keeps_enrolment_and_probe_disjoint_and_cuts_calls_by_speech() -> None:
    plan = plan_speaker(5, 3.0, 6.0, summed, summed, max_calls=5)
    assert plan.enrol == [0, 1] and plan.probe == [2, 3, 4] and plan.target
    assert plan.calls == [[0, 1, 2]]  # the rest (4.0 s) never reaches the search point
    short = plan_speaker(2, 3.0, 6.0, summed, summed, max_calls=5)
    assert short.enrol == [0, 1] and short.probe is None and not short.target
    assert short.calls == []  # 3.8 s: the bridge never searches such a call
    capped = plan_speaker(5, 1.0, 1.0, summed, summed, max_calls=2)
    assert capped.calls == [[0], [1]]


def test_accounted_speech_counts_only_the_new_part_of_overlapping_windows() -> None:
    assert accounted_speech([2.0, 2.0, 1.0], 0.5) == pytest.approx(3.5)
    assert accounted_speech([], 0.5) == 0.0


def test_own_voice_entries() -> None:
    assert own_voice("real:so762_0024", "so762_0024")
    assert not own_voice("real:so762_0025", "so762_0024")
    assert own_voice("speed:so762_0024:0.9", "so762_0024")
    assert not own_voice("speed:so762_00241:0.9", "so762_0024")
    assert own_voice("mix:a+so762_0024", "so762_0024")
    assert not own_voice("mix:a+b", "so762_0024")


def test_without_own_voice_drops_the_targets_pseudo_entries_only() -> None:
    rng = np.random.default_rng(0)
    cohort = Cohort(l2_normalise(rng.standard_normal((20, 8)).astype(np.float32)))
    ids = ["real:a", "real:b", "speed:a:0.9", "speed:b:0.9", "mix:a+b"]
    vecs = rng.standard_normal((5, 8)).astype(np.float32)
    index = WatchlistIndex.build("t", 1, ids, vecs, cohort)
    kept = without_own_voice(index, "a")
    assert kept.ids == ("real:a", "real:b", "speed:b:0.9")
    assert kept.threshold == index.threshold  # the list's size still sets the threshold
    assert np.array_equal(kept.matrix, index.matrix[[0, 1, 3]])
    assert np.array_equal(kept.entry_mu, index.entry_mu[[0, 1, 3]])
    assert without_own_voice(index, "c") is index
