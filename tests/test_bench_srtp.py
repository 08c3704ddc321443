"""`callshield bench srtp` smoke: every variant's packets pass (unprotected and parsed),
and the result carries the distributions and the per-suite difference to plain RTP."""

from __future__ import annotations

from pathlib import Path

from native.srtp import SRTP_SUITES
from sip_bridge.bench.srtp import PLAIN, benchmark


def test_bench_srtp_smoke(shared_dir: Path) -> None:
    out = benchmark(1.0, 1, shared_dir / "data/speech/asterisk_prompts/en")
    n = out["packets_per_repeat"]
    assert n == 50
    for name in (PLAIN, *SRTP_SUITES):
        variant = out["per_packet"][name]
        assert variant["packets_passed"] == n and variant["n"] == n
        assert variant["p50"] > 0
    assert set(out["added_over_plain"]) == set(SRTP_SUITES)
