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
    # Whether a step degrades depends on how busy the machine is (that is what the
    # benchmark measures), so the smoke test checks the accounting, not the outcome.
    for peer in ("sip", "siprec"):
        figures = step[peer]
        assert figures["calls"] > 0
        assert 0 <= figures["successful"] <= figures["calls"]
        assert figures["setup_ms"]["n"] == figures["successful"]
        if figures["successful"] < figures["calls"]:
            assert f"{peer}: failed calls" in step["degraded"]
    assert step["sip"]["successful"] > 0
    assert step["frames"]["legs"] >= step["sip"]["successful"]
    assert step["frames"]["lost"] >= 0
    assert "knee" in result
