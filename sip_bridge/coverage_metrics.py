"""Coverage on the bridge's ``/metrics`` (DESIGN §8), read from the coverage tracker
that every ``ended`` call event goes through (``detectors.bus.coverage_objective``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from detectors.bus.coverage_objective import CoverageTracker


class CoverageCollector(Collector):
    def __init__(self, tracker: CoverageTracker) -> None:
        self._t = tracker

    def collect(self) -> Iterator[Any]:
        t = self._t
        snap = t.snapshot()
        o = t.objective
        ratio = GaugeMetricFamily(
            "callshield_calls_covered_ratio",
            f"Fraction of the last {o.window_calls} calls ended on this bridge whose "
            "dimension was covered: the call was analysed and the dimension scored at "
            f"least one window with at least the configured minimum net speech "
            f"(CALLSHIELD_COVERAGE_MIN_SPEECH_S, default {t.rule.min_speech_s:g} s) "
            "analysed; shed, no-media and too-short calls count as not covered. "
            "No sample until a call has ended",
            labels=["dimension"],
        )
        calls = GaugeMetricFamily(
            "callshield_calls_covered_window_calls",
            "Ended calls in the covered-ratio window (at most "
            f"CALLSHIELD_COVERAGE_WINDOW_CALLS = {o.window_calls})",
            labels=["dimension"],
        )
        degraded = GaugeMetricFamily(
            "callshield_coverage_degraded",
            f"1 while the dimension's covered ratio is below its objective ({o.objective:g}, "
            f"judged from {o.min_calls} calls on; recovers at +{o.recover_margin:g})",
            labels=["dimension"],
        )
        for dim, w in snap.dimensions.items():
            if w.ratio is not None:
                ratio.add_metric([dim.value], w.ratio)
            calls.add_metric([dim.value], w.calls)
            degraded.add_metric([dim.value], int(w.degraded))
        yield ratio
        yield calls
        yield degraded
        yield GaugeMetricFamily(
            "callshield_coverage_objective", "Covered-ratio objective", value=o.objective
        )
        ended = CounterMetricFamily(
            "callshield_calls_ended",
            "Calls ended on this bridge, by reason (bye, cancel, rtp_timeout, drained, ...)",
            labels=["reason"],
        )
        for reason, n in sorted(snap.ended.items()):
            ended.add_metric([reason], n)
        yield ended
        for name, value, text in (
            ("calls_no_media", snap.no_media, "Ended calls on which no leg carried media"),
            (
                "calls_one_way",
                snap.one_way,
                "Ended calls on which some legs carried media and another stayed silent",
            ),
            ("calls_shed", snap.shed, "Ended calls answered but not analysed (capacity)"),
        ):
            yield CounterMetricFamily(f"callshield_{name}", text, value=value)

    def describe(self) -> Iterator[Any]:
        return iter(())
