"""`callshield bench capacity|alert-latency --models-dir DIR`: a directory without a
synthetic_voice model is a clear error before any call runs (nothing would be measured);
the suspicious utterance of an installed-model run is the given synthetic speech; and
`bench utterance-ends`, the rule's cost on real speech."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from sip_bridge.bench import utterance_ends
from sip_bridge.bench.alert_latency import _spoof_utterance


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sip_bridge.cli", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_models_dir_without_a_synthetic_voice_model_is_refused(tmp_path: Path) -> None:
    for bench in ("capacity", "alert-latency"):
        extra = ["--spoof-dir", str(tmp_path)] if bench == "alert-latency" else []
        out = _bench(bench, "--json", "--models-dir", str(tmp_path), *extra)
        assert out.returncode != 0
        assert "no synthetic_voice model installed there" in out.stderr
        assert out.stdout == ""


def test_spoof_utterance_replaces_the_span_then_silence() -> None:
    speech = np.full(8000 * 6, 7, np.int16)
    spoofs = [np.full(8000, 1, np.int16), np.full(4000, 2, np.int16)]
    out = _spoof_utterance(speech, spoofs, 0, 1.0, 2.0)
    assert (out[:8000] == 7).all()  # genuine speech before the onset
    assert (out[8000:16000] == 1).all() and (out[16000:20000] == 2).all()
    assert (out[20000:24000] == 1).all()  # the clips repeat to fill the utterance
    assert (out[24000:] == 0).all()  # then the caller stops talking
    assert (speech == 7).all()  # the input is not changed


def test_utterance_ends_bench_counts_what_each_rule_cuts(shared_dir: Path) -> None:
    """`bench utterance-ends` on real speech: ends closer together (min_apart 0.5 s vs
    1.5 s) cut more ends and reach more of the recordings' real ends, and every count
    stays within what the sessions hold."""
    parser = argparse.ArgumentParser()
    utterance_ends.add_arguments(parser)
    speech = str(shared_dir / "data/speech")
    args = parser.parse_args(
        ["--speech-dir", speech, "--sessions", "2", "--minutes", "0.5", "--hangover", "0.1"]
    )
    args.min_apart = [1.5, 0.5]
    result = utterance_ends.run(args)
    wide, close = result["rules"]
    assert (wide["min_apart_s"], close["min_apart_s"]) == (1.5, 0.5)
    assert result["sessions"] == 2 and wide["real_ends"] == close["real_ends"] > 0
    assert close["ends_cut"] > wide["ends_cut"] > 0
    assert close["real_ends_with_a_window"] >= wide["real_ends_with_a_window"]
    for rule in (wide, close):
        assert rule["real_ends_with_a_window"] <= rule["real_ends"]
        assert rule["ends_inside_phrases"] <= rule["ends_cut"]
        assert rule["scored_windows"] > 0
