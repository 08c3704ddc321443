"""Admission before any traffic (issue 5): the estimate is seeded from the pre-warm
timings with the pool full, a quiet pool's costs are scaled to what they cost when the
node is full, and a burst arriving in one tick is judged call by call, so a fresh node
refuses or sheds the calls beyond its capacity instead of admitting the whole burst."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import Built
from test_fusion_policy import Publisher

from detectors.admission import Admission, AdmissionConfig, OverloadPolicy
from detectors.metrics import DetectorMetrics, render
from detectors.onnx_detector import OnnxDetector
from detectors.prewarm_cost import PrewarmCosts
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig

# the 2-core box's 8 kHz AASIST: 24 ms per window alone, 42 ms with the pool full
COSTS = PrewarmCosts(
    workers=2,
    alone={"aasist": {1: 0.024, 2: 0.024, 4: 0.025, 8: 0.026}},
    loaded={"aasist": 0.042},
)
DEMAND = {"aasist": 0.76}  # windows per call-second (1.5 s hop, +14 % utterance ends)


class _Clock:
    t = 50.0

    def __call__(self) -> float:
        return self.t


def _admission(policy: OverloadPolicy = OverloadPolicy.REFUSE) -> Admission:
    return Admission(
        AdmissionConfig(policy=policy, workers=2, utilisation=0.8, seed_margin=1.0),
        DEMAND,
        DetectorMetrics(),
        clock=_Clock(),
        concurrency={"aasist": 2},
    )


def test_a_fresh_node_refuses_the_burst_beyond_its_seeded_capacity() -> None:
    unseeded = _admission()
    assert unseeded.capacity() == 1000  # no cost known: the ceiling alone
    adm = _admission()
    adm.seed(COSTS)
    cap = int(2 * 0.8 / (0.76 * 0.042))  # 50
    assert adm.capacity() == cap == adm.seeded_capacity()
    # a dialer burst of 60 calls in one tick, no batch observed in between
    decisions = [adm.admit(f"c{i}") for i in range(60)]
    assert sum(d.analysed for d in decisions) == cap
    assert all(d.analysed for d in decisions[:cap])
    refused = decisions[cap:]
    assert all(not d.admitted and d.reason == "capacity" for d in refused)
    adm.release("c0")
    assert adm.admit("late").analysed  # one left, one more in


def test_shed_policy_answers_the_burst_beyond_capacity_unanalysed() -> None:
    adm = _admission(OverloadPolicy.SHED)
    adm.seed(COSTS)
    decisions = [adm.admit(f"c{i}") for i in range(adm.capacity() + 7)]
    shed = [d for d in decisions if not d.analysed]
    assert len(shed) == 7 and all(d.admitted and d.reason == "capacity" for d in shed)


def test_a_quiet_pools_cost_is_scaled_to_the_full_pools() -> None:
    """One call alone runs batches of one on a quiet pool at 24 ms per window: the
    estimate stays at what a window costs with the pool full. Batches measured with the
    pool full count as measured."""
    adm = _admission()
    adm.seed(COSTS)
    seeded = adm.capacity()
    for _ in range(50):  # a long single-call round: batches of 1, alone on the pool
        adm.observe_batch("aasist", 1, 0.024, [0.0], pool_busy=1)
    assert adm.capacity() == seeded
    for _ in range(50):  # the same batches unscaled (no pool figure): the old estimate
        adm.observe_batch("aasist", 1, 0.024, [0.0])
    assert adm.capacity() == int(1.6 / (0.76 * 0.024))
    full = _admission()
    full.seed(COSTS)
    for _ in range(100):  # under load the pool is full: 60 ms per window is taken as is
        full.observe_batch("aasist", 8, 0.48, [0.0] * 8, pool_busy=2)
    assert full.capacity() == int(1.6 / (0.76 * 0.06))


def test_contention_is_taken_at_the_largest_timed_shape_not_above_the_batch() -> None:
    costs = PrewarmCosts(2, {"m": {1: 0.02, 2: 0.015, 4: 0.01}}, {"m": 0.03})
    assert costs.contention("m", 1) == pytest.approx(1.5)
    assert costs.contention("m", 3) == pytest.approx(2.0)
    assert costs.contention("m", 9) == pytest.approx(3.0)
    assert costs.contention("other", 1) is None
    cheaper = PrewarmCosts(2, {"m": {1: 0.05}}, {"m": 0.03})
    assert cheaper.contention("m", 1) == 1.0  # a full pool never makes a window cheaper


def test_the_seed_is_in_the_snapshot_and_the_metrics() -> None:
    metrics = DetectorMetrics()
    adm = Admission(AdmissionConfig(workers=2), DEMAND, metrics, concurrency={"aasist": 2})
    adm.seed(COSTS)  # the default margin: the rest of the process takes 20 % more
    seeded = adm.snapshot()["seeded"]
    cap = int(1.6 / (0.76 * 0.042 * 1.2))  # 41
    assert isinstance(seeded, dict) and seeded["capacity"] == cap and seeded["margin"] == 1.2
    assert seeded["loaded_cost_per_window_s"] == {"aasist": 0.042}  # as timed
    assert seeded["contention"] == {"aasist": pytest.approx(0.042 / 0.026)}
    body = render(metrics.registry)[0].decode()
    assert f"callshield_capacity_seeded_calls {float(cap)}" in body
    assert f"callshield_capacity_calls {float(cap)}" in body
    assert f"callshield_capacity_remaining_calls {float(cap)}" in body
    for _ in range(50):  # a quiet pool's batches of one scale to the seed, margin included
        adm.observe_batch("aasist", 1, 0.024, [0.0], pool_busy=1)
    assert adm.capacity() == cap


def _runtime(dets: list[OnnxDetector], utilisation: float) -> DetectorRuntime:
    return DetectorRuntime(
        dets,
        Publisher(),
        config=RuntimeConfig(
            workers=2,
            lanes=LaneConfig(max_batch=4, max_inflight=2),
            admission=AdmissionConfig(
                max_calls=10**6, policy=OverloadPolicy.REFUSE, utilisation=utilisation
            ),
        ),
    )


def _per_call(rt: DetectorRuntime, costs: PrewarmCosts) -> float:
    demand = rt.admission.snapshot()["windows_per_call_s"]
    assert isinstance(demand, dict)
    return sum(float(demand[d]) * c for d, c in costs.loaded.items())


def test_the_runtime_seeds_admission_from_its_prewarm_and_refuses_the_burst_beyond(
    tiny_aasist: Built, vad_model: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    """Through the real pre-warm (two fixture ONNX models on a pool of two): before any
    window has run, the estimate is the pre-warm's full-pool cost, and a burst of calls
    opened in one go gets exactly that many analysed. (The tiny models are cheap: a
    first pre-warm sizes the utilisation so the second node's capacity is ~20 calls.)"""
    aasist, vad = make_detector(tiny_aasist), make_detector(vad_model)
    probe = _runtime([aasist, vad], 0.8)
    probe.start()
    probe.close()
    assert probe.scheduler.prewarm is not None
    utilisation = min(0.8, 20 * 1.2 * _per_call(probe, probe.scheduler.prewarm) / 2)
    rt = _runtime([aasist, vad], utilisation)
    assert rt.admission.capacity() == 10**6  # before the pre-warm: nothing measured
    rt.start()
    try:
        costs = rt.scheduler.prewarm
        assert costs is not None and set(costs.loaded) == {aasist.spec.name, vad.spec.name}
        for name, shapes in costs.alone.items():
            assert sorted(shapes) == [1, 2, 4] and costs.loaded[name] > 0
        cap = rt.admission.capacity()
        margin = rt.admission.config.seed_margin
        expected = int(2 * utilisation / (margin * _per_call(rt, costs)))
        assert cap == rt.admission.seeded_capacity() == expected
        assert 0 < cap < 10**6
        decisions = [rt.open_call(f"c{i}") for i in range(cap + 5)]
        assert sum(d.analysed for d in decisions) == cap
        assert [d.reason for d in decisions[cap:]] == ["capacity"] * 5
        assert rt.admission.remaining() == 0
    finally:
        rt.close()
