"""The synthetic_voice dev threshold rule (train.quantile_upper_bound, build.threshold_rule):
a distribution-free upper confidence bound on the genuine 98th percentile that holds its
coverage, falls back to the highest score when the evidence cannot bound a 2 % rate, and
never goes below the old 2 %-of-dev-calls rule. Pure logic, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detectors.synthetic import build, channel, train


def test_binomial_cdf_matches_the_exact_sum() -> None:
    for n, p in ((10, 0.3), (63, 0.98), (200, 0.5)):
        for k in (-1, 0, n // 3, n - 1, n):
            exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k + 1, 0)))
            assert train._binom_cdf(k, n, p) == pytest.approx(min(exact, 1.0), abs=1e-12)


def test_too_few_scores_cannot_bound_two_percent_so_the_maximum_is_used() -> None:
    # 1 - 0.98**n >= 0.95 needs n >= 149: below that, just above the highest score
    for n in (2, 63, 148):
        scores = list(np.linspace(0.1, 0.7, n))
        t = train.quantile_upper_bound(scores, 0.02, 0.95)
        assert t > 0.7 and t == pytest.approx(0.7)
    t149 = train.quantile_upper_bound(list(np.linspace(0.1, 0.7, 149)), 0.02, 0.95)
    assert t149 == pytest.approx(0.7)  # the first n with a bound: still the maximum


def test_bound_is_the_binomial_order_statistic() -> None:
    scores = [i / 1000 for i in range(1000)]  # 0.000 .. 0.999
    t = train.quantile_upper_bound(scores, 0.02, 0.95)
    # mean 980, sd 4.43 below the quantile: rank 988 (1-based, ascending), X = 0.987
    assert t == pytest.approx(0.987) and t > 0.987
    plain = train.threshold_at_fa(scores, 0.02)
    assert plain < t  # the bound is stricter than the empirical 2 % point
    assert train.quantile_upper_bound(scores, 0.02, 0.5) < t  # less confidence, lower


def test_bound_keeps_its_coverage_where_the_plain_quantile_does_not() -> None:
    rng = np.random.default_rng(7)
    trials, n = 200, 400
    bound_fails = plain_fails = 0
    q = 0.98  # uniform scores: the true false-alarm rate at t is 1 - t
    for _ in range(trials):
        s = list(rng.random(n))
        bound_fails += (1 - train.quantile_upper_bound(s, 0.02, 0.95)) > 1 - q
        plain_fails += (1 - train.threshold_at_fa(s, 0.02)) > 1 - q
    assert bound_fails <= 0.05 * trials * 2  # nominal 5 %, binomial noise on 200 trials
    assert plain_fails >= 0.3 * trials  # the empirical point overshoots about half the time


def test_rule_takes_the_stricter_of_calls_and_windows() -> None:
    calls = [0.1 + 0.01 * i for i in range(63)]  # 2 % of 63 is one call: above the 2nd highest
    windows = list(np.linspace(0.0, 0.9, 2000))
    r = build.threshold_rule(calls, windows)
    assert r["calls_2pct"] == pytest.approx(0.71) and r["calls_2pct"] > 0.71
    assert r["windows_upper_bound"] > 0.87
    assert r["threshold"] == max(r["calls_2pct"], r["windows_upper_bound"])
    low_windows = list(np.linspace(0.0, 0.3, 2000))
    assert build.threshold_rule(calls, low_windows)["threshold"] == r["calls_2pct"]
    assert build.threshold_rule([], [])["threshold"] == 0.5
    with pytest.raises(ValueError):
        train.quantile_upper_bound([], 0.02, 0.95)
    with pytest.raises(ValueError):
        train.quantile_upper_bound([0.5], 0.0, 0.95)


def test_only_random_conditions_are_drawn_more_than_once() -> None:
    rng = np.random.default_rng(3)
    speech = [(0.1 * rng.standard_normal(train.WINDOW)).astype(np.float32)]
    # copies of a deterministic channel would count one window four times as evidence
    for cond in ("clean", "pcmu", "pcma"):
        assert build.draws(cond, speech) == 1
    assert build.draws("pcmu_loss5", speech) == build.DEV_DRAWS > 1
    assert build.draws("pcmu", []) == 1
    assert set(channel.CONDITIONS) == {"clean", "pcmu", "pcma", "pcmu_loss5"}
