"""The bridge gives each model's lane the configured concurrency (issue 5): the
detector_max_inflight / detector_intra_op_threads / detector_max_batch settings reach the
built runtime's lanes and the ONNX sessions (asked of ONNX Runtime itself), each lane is
logged once, and `callshield bench capacity` by default runs exactly the bridge's configuration."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from detectors.onnx_detector import OnnxDetector
from detectors.replay.detector import NAME as REPLAY
from sip_bridge.bench import capacity
from sip_bridge.detector_lanes import DetectorConcurrency
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


def _wiring(tmp_path: Path, settings: BusSettings, **values: object) -> Wiring:
    bridge = Settings.model_validate(
        {"dev_fixture_models": "tiny", "http_listen": "", "api_listen": "", **values}
    )
    return Wiring(bridge, settings, ModelSettings(models_dir=tmp_path / "no-models"))


def _lanes(wiring: Wiring) -> dict[str, tuple[int, int | None]]:
    """Per model: its lane's max_inflight and its session's intra-op threads."""
    threads = {
        d.spec.name: d.intra_op_threads if isinstance(d, OnnxDetector) else None
        for d in wiring.detectors
    }
    return {
        name: (cfg.max_inflight, threads[name])
        for name, cfg in wiring.runtime.scheduler.lane_configs().items()
    }


def test_configured_concurrency_reaches_lanes_and_sessions(
    tmp_path: Path, settings: BusSettings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "sip_bridge.detector_lanes"):
        wiring = _wiring(
            tmp_path,
            settings,
            detector_workers=3,
            detector_max_inflight=2,
            detector_intra_op_threads=2,
            detector_max_batch=2,
        )
    try:
        lanes = _lanes(wiring)
        assert {c.max_batch for c in wiring.runtime.scheduler.lane_configs().values()} == {2}
        onnx = [d.spec.name for d in wiring.detectors if isinstance(d, OnnxDetector)]
        assert len(onnx) >= 2 and wiring.runtime.config.workers == 3
        assert all(lanes[name] == (2, 2) for name in onnx), lanes
        assert lanes[REPLAY] == (2, None)  # numpy: no session, same lane
        logged = [r.getMessage() for r in caplog.records]
        for name in lanes:  # one line per lane, naming what it got
            mine = [m for m in logged if m.startswith(f"detector lane {name}:")]
            assert len(mine) == 1 and "max_inflight 2 of 3 workers, max_batch 2" in mine[0], logged
    finally:
        wiring.close()


def test_defaults_let_one_model_use_every_worker(tmp_path: Path, settings: BusSettings) -> None:
    wiring = _wiring(tmp_path, settings, detector_workers=3)
    try:
        onnx = {d.spec.name for d in wiring.detectors if isinstance(d, OnnxDetector)}
        assert {_lanes(wiring)[n] for n in onnx} == {(3, 1)}
        assert {c.max_batch for c in wiring.runtime.scheduler.lane_configs().values()} == {8}
    finally:
        wiring.close()


def test_a_lane_wider_than_the_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds detector_workers"):
        Settings.model_validate({"detector_workers": 2, "detector_max_inflight": 3})


def test_bench_capacity_runs_the_bridge_configuration(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALLSHIELD_DETECTOR_WORKERS", "3")
    monkeypatch.setenv("CALLSHIELD_DETECTOR_INTRA_OP_THREADS", "2")
    monkeypatch.setenv("CALLSHIELD_DETECTOR_MAX_BATCH", "4")
    bridge = DetectorConcurrency.from_settings(Settings())
    assert bridge.as_dict() == {
        "workers": 3,
        "max_inflight": 3,
        "intra_op_threads": 2,
        "max_batch": 4,
    }
    parser = argparse.ArgumentParser()
    capacity.add_arguments(parser)
    speech = str(shared_dir / "data/speech/asterisk_prompts/en")
    base = ["--tiny", "--start", "1", "--max-calls", "1", "--step-seconds", "1"]
    result = capacity.run(parser.parse_args([*base, "--speech-dir", speech]))
    config = result["config"]
    got = {k: config[k] for k in ("workers", "max_inflight", "intra_op_threads", "max_batch")}
    assert got == bridge.as_dict() == config["bridge_defaults"]
    assert {lane["max_inflight"] for lane in config["lanes"].values()} == {3}
    assert {lane["max_batch"] for lane in config["lanes"].values()} == {4}
    # flags override, and say so in the same report
    args = parser.parse_args([*base, "--speech-dir", speech, "--max-inflight", "1"])
    assert capacity.concurrency(args).as_dict() == {
        "workers": 3,
        "max_inflight": 1,
        "intra_op_threads": 2,
        "max_batch": 4,
    }
