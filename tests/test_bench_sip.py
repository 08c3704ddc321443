"""`callshield bench sip --json --tiny`: SIPp places a few calls with RTP against a real
bridge; the JSON has the figures the issue asks for, and the tiny step holds."""

from __future__ import annotations

import json

import pytest

from sip_bridge.cli import main


def test_bench_sip_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sip", "--json", "--tiny", "--rtp-ports", "45000-45999"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "sip"
    (step,) = result["steps"]
    assert step["degraded"] == [], step
    assert step["sip"]["successful"] == step["sip"]["calls"] > 0
    assert step["siprec"]["successful"] == step["siprec"]["calls"] > 0
    assert step["sip"]["setup_ms"]["n"] == step["sip"]["calls"]
    assert step["siprec"]["setup_ms"]["n"] == step["siprec"]["calls"]
    assert step["concurrent_calls_peak"] >= 2
    assert step["frames"]["legs"] == step["sip"]["calls"] + step["siprec"]["calls"]
    assert step["frames"]["lost"] == 0
    knee = result["knee"]
    assert knee is not None and knee["setup_ms_p99"] is not None
    assert knee["siprec_setup_ms_p99"] is not None
