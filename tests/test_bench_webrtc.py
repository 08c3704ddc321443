"""`callshield bench webrtc --tiny --json`: aiortc publishers in their own process
publish real speech over WHIP to the real bridge, then to plain aiortc; the JSON has
both paths' loop lag, frame loss and CPU per publisher, and frames flowed on both."""

from __future__ import annotations

import json

import pytest

from sip_bridge.cli import main


def test_bench_webrtc_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "webrtc", "--tiny", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "webrtc"
    assert result["config"]["publishers"] == 2
    for path in ("native", "aiortc"):
        figures = result[path]
        assert figures["publishers_connected"] == 2 and figures["refused"] == {}
        assert figures["publisher"]["deleted_ok"] == 2
        assert figures["loop_lag_ms"]["n"] > 50 and figures["loop_lag_ms"]["p99"] >= 0
        assert figures["cpu_per_publisher_pct"] > 0
        sent = sum(figures["publisher"]["frames_sent"])
        assert figures["frames_expected"] == sent and sent >= 2 * 100  # 3 s of 20 ms frames
        assert figures["frames"] > 0.5 * sent  # audio flowed through each path
        assert 0 <= figures["frame_loss"] <= 1
    assert result["native"]["calls_ended"] == 2  # DELETE ended every call
    assert result["native"]["frames_per_leg"]["n"] == 2
    assert set(result["ratio_native_over_aiortc"]) >= {"loop_lag_p99", "cpu_per_publisher"}
