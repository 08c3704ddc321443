"""EER and operating-point rates against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from detectors.eval.metrics import eer, rates_at


def test_perfect_separation_is_zero() -> None:
    r = eer([0.1, 0.2], [0.8, 0.9])
    assert r is not None
    assert r.eer == 0.0
    assert r.threshold == 0.8  # the lowest threshold flagging every spoof and no bona fide
    assert (r.false_alarm, r.miss) == (0.0, 0.0)


def test_all_equal_is_one_half() -> None:
    r = eer([0.5, 0.5, 0.5], [0.5, 0.5])
    assert r is not None
    assert r.eer == pytest.approx(0.5)
    assert r.threshold == 0.5 and (r.false_alarm, r.miss) == (1.0, 0.0)


def test_reversed_scores_are_one() -> None:
    r = eer([0.9, 0.8], [0.1, 0.2])
    assert r is not None and r.eer == pytest.approx(1.0)


def test_ties_across_labels_interpolate() -> None:
    # t=0.6: FA 2/4 (0.6, 0.6), miss 0; t=0.8: FA 0, miss 1/2 -> crossing halfway: 0.25
    r = eer([0.2, 0.4, 0.6, 0.6], [0.6, 0.8])
    assert r is not None
    assert r.eer == pytest.approx(0.25)
    assert r.threshold == 0.6  # |0.5 - 0| == |0 - 0.5|: the lower candidate


def test_exact_crossing_at_a_score() -> None:
    # t=0.4: FA 1/3 (0.5), miss 1/3 (0.2)
    r = eer([0.1, 0.3, 0.5], [0.2, 0.4, 0.6])
    assert r is not None
    assert r.eer == pytest.approx(1 / 3)
    assert r.threshold == 0.4


def test_empty_side_has_no_eer() -> None:
    assert eer([], [0.3]) is None
    assert eer([0.3], []) is None


def test_rates_at_threshold_use_greater_or_equal() -> None:
    fa, miss = rates_at([0.1, 0.5, 0.7, 0.2], [0.5, 0.4], 0.5)
    assert fa == 0.5 and miss == 0.5
    assert rates_at([], [0.1], 0.5) == (None, 1.0)
    fa, miss = rates_at([0.3], [0.3], math.inf)
    assert fa == 0.0 and miss == 1.0
