"""Admission's capacity estimate counts a model on no more of the worker pool than its
lane may use at once (``LaneConfig.max_inflight``): with one batch of the heavy model at
a time, four workers do not carry four workers' worth of that model (issue 5)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import Built
from test_fusion_policy import Publisher

from detectors.admission import Admission, AdmissionConfig
from detectors.onnx_detector import OnnxDetector
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig


def test_one_models_lane_bounds_the_estimate() -> None:
    config = AdmissionConfig(workers=4, utilisation=1.0)
    demand = {"heavy": 1.0, "light": 1.0}
    whole_pool = Admission(config, demand)
    one_lane = Admission(config, demand, concurrency={"heavy": 1, "light": 4})
    for adm in (whole_pool, one_lane):
        adm.observe_batch("heavy", 1, 0.1, [])  # 0.1 worker-s per window, 1 window/s/call
        adm.observe_batch("light", 1, 0.01, [])
    assert whole_pool.capacity() == 36  # 4 / 0.11
    assert one_lane.capacity() == 10  # the heavy lane: 1 / 0.1
    two = Admission(config, demand, concurrency={"heavy": 2, "light": 4})
    two.observe_batch("heavy", 1, 0.1, [])
    two.observe_batch("light", 1, 0.01, [])
    assert two.capacity() == 20


def test_the_runtime_hands_each_lanes_max_inflight_to_admission(
    tiny_aasist: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    det = make_detector(tiny_aasist)
    name = det.spec.name
    capacities, per_call = {}, 0.0
    for inflight in (1, 2):
        rt = DetectorRuntime(
            [det],
            Publisher(),
            config=RuntimeConfig(workers=4, lanes=LaneConfig(max_inflight=inflight)),
        )
        assert rt.scheduler.lane_configs()[name].max_inflight == inflight
        rt.admission.observe_batch(name, 1, 0.05, [])
        demand = rt.admission.snapshot()["windows_per_call_s"]
        assert isinstance(demand, dict)
        per_call = float(demand[name])
        capacities[inflight] = rt.admission.capacity()
    whole = int(4 * 0.8 / (per_call * 0.05))
    assert capacities[1] < capacities[2] < whole
    assert capacities[2] == int(2 * 0.8 / (per_call * 0.05))
