"""``callshield bench dtmf`` on a few ticks: the result's shape, no timings."""

from __future__ import annotations

import argparse
from pathlib import Path

from sip_bridge.bench import dtmf


def test_bench_dtmf_reports_both_paths_per_leg_count(shared_dir: Path) -> None:
    args = argparse.Namespace(
        legs=[1, 7], ticks=20, speech=shared_dir / "data/speech/asterisk_prompts"
    )
    out = dtmf.run(args)
    for legs in (1, 7):
        res = out[f"legs_{legs}"]
        assert res["inband_dtmf_per_tick"]["n"] == 20
        assert res["baseline_tone_check_per_tick"]["n"] == 20
        assert res["false_keys_on_speech"] == 0
        assert res["inband_us_per_leg_frame_p50"] > 0
