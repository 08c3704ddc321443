"""`callshield bench capacity` runs end to end (tiny fixtures, two short steps) and
reports the knee, CPU per call and the batched-vs-unbatched ratio from the same run."""

from __future__ import annotations

import argparse
from pathlib import Path

from detectors.admission import Decision
from sip_bridge.bench import capacity


def test_capacity_smoke(shared_dir: Path) -> None:
    parser = argparse.ArgumentParser()
    capacity.add_arguments(parser)
    args = parser.parse_args(
        [
            "--tiny",
            "--start",
            "1",
            "--step",
            "1",
            "--max-calls",
            "2",
            "--step-seconds",
            "1.5",
            "--workers",
            "2",
            "--speech-dir",
            str(shared_dir / "data/speech/asterisk_prompts/en"),
        ]
    )
    result = capacity.run(args)
    assert result["provider"] in ("cpu", "cuda")
    assert [s["calls"] for s in result["steps"]][: len(result["steps"])] in ([1], [1, 2])
    step = result["steps"][0]
    for key in ("queue_wait", "tick_lag", "cpu_percent_per_call", "windows", "mean_batch"):
        assert key in step
    assert sum(step["windows"].values()) > 0
    assert step["calls_analysed"] == step["calls"] and "refused" not in step["failed"]
    ratio = result["batched_vs_unbatched"]
    assert ratio["ratio"] > 0 and ratio["windows_per_s_batch_1"] > 0
    assert result["knee_calls"] in (0, 1, 2)


class _Refusing:
    """Admission that analyses no call (the capacity estimate is spent)."""

    def __init__(self) -> None:
        self.legs: list[tuple[object, ...]] = []

    def open_call(self, call_id: str) -> Decision:
        return Decision(True, False, "capacity")

    def add_leg(self, *args: object) -> None:
        self.legs.append(args)


def test_a_call_admission_does_not_analyse_is_recorded_and_never_scored() -> None:
    # the ramp used to drop open_call's decision: with the full AASIST (capacity
    # estimate ~10 calls) a "60-call" step scored about ten calls and passed
    stats = capacity._Stats()
    runtime = _Refusing()
    capacity._join(runtime, "call7", [], stats)  # type: ignore[arg-type]
    assert stats.refused == {"call7": "capacity"} and runtime.legs == []
