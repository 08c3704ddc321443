"""`callshield demo`'s detection part: live calls over UDP into the ingest thread and
the detector runtime.

- With the runtime's tiny fixture detectors: a call of real speech whose second half
  carries the synthetic-voice fixture's marker tone raises one synthetic_voice alert
  after the tone starts; the genuine call raises none; the espeak-ng call is scored.
- With no model installed, the demo keeps its media-core report and says how to install
  one.
- With a real installed synthetic_voice model (the official AASIST-L checkpoint from
  shared/, imported by `callshield models import-aasist`), `callshield demo` plays
  genuine and espeak-ng calls through it and prints every call's scored windows.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import Dimension
from detectors.fixture_models import MARKER_HZ, aasist_fixture
from detectors.onnx_detector import OnnxDetector
from sip_bridge import demo_detect
from sip_bridge.cli import main
from sip_bridge.demo import find_speech, leg_audio


def _marked(speech: npt.NDArray[np.int16], from_s: float) -> npt.NDArray[np.int16]:
    x = speech.astype(np.float64)
    t = np.arange(x.size) / 8000
    start = int(from_s * 8000)
    x[start:] += 32768 * 0.1 * np.sin(2 * np.pi * MARKER_HZ * t[start:])
    return np.clip(x, -32768, 32767).astype(np.int16)


def test_live_calls_through_the_runtime_alert_only_on_the_marked_one() -> None:
    files = find_speech(None)
    assert files, "real speech (shared/ or asterisk-core-sounds-en-wav) is required"
    data, manifest = aasist_fixture(tiny=True)
    detectors = [OnnxDetector(manifest, data)]
    calls = [
        demo_detect.DemoCall("genuine", "genuine", "speech", leg_audio(files, 1, 4.0)),
        demo_detect.DemoCall(
            "synthetic",
            "synthetic",
            "espeak-ng",
            demo_detect.espeak_speech(demo_detect.SENTENCES[0], "en-us", 4.0),
        ),
        demo_detect.DemoCall("marked", "marked", "speech", _marked(leg_audio(files, 2, 4.0), 2.0)),
    ]
    alerts = demo_detect.run_calls(detectors, calls, threading.Event())
    by_name = {c.name: c for c in calls}
    assert all(c.sent == 200 for c in calls)
    for c in calls:  # 0.5 s windows every 0.25 s over 4 s of audio
        assert len([s for _, s in c.results if s is not None]) >= 12, c.name
    (alert,) = alerts
    assert alert["call_id"] == by_name["marked"].call_id
    assert alert["dimension"] == Dimension.SYNTHETIC_VOICE.value
    assert 2.0 < float(alert["raised_at_s"]) <= 3.0  # type: ignore[arg-type]
    marked = by_name["marked"].results
    assert max(s for t, s in marked if s is not None and t <= 1.9) < 0.5
    report = demo_detect.report(calls, alerts)
    assert "marked" in report and "high at" in report


def test_demo_without_a_model_says_how_to_install_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "demo",
                "--media-core",
                "--seconds",
                "1",
                "--calls",
                "1",
                "--models-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "call 1 caller (clean)" in out  # the media-core report is still there
    assert "no synthetic-voice model is installed" in out
    assert "callshield models train-synthetic" in out


def test_demo_with_an_installed_synthetic_voice_model(
    aasist_l_cli_import: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # AASIST-L as `callshield models import-aasist` installed it (once per session)
    models, _ = aasist_l_cli_import
    args = ["demo", "--media-core", "--seconds", "5", "--calls", "1", "--detection-calls", "2"]
    # a deadline no load reaches: at the bridge's 2 s, AASIST-L on a loaded box missed it
    # for every window (each unavailable), so no window was scored and peak was "-"
    args += ["--detector-deadline", "120"]
    # batches of up to 2 windows (the two detection calls' windows still share a batch):
    # the runtime pre-warms and times every batch shape up to max_batch with the real
    # model, and at the default 8 that was ~100 AASIST-L windows (~34 s) before a call
    monkeypatch.setenv("CALLSHIELD_DETECTOR_MAX_BATCH", "2")
    assert main([*args, "--models-dir", str(models)]) == 0
    out = capsys.readouterr().out
    assert "detections with aasist-l" in out
    row = re.compile(r"^call (\d+)\s+(genuine|synthetic)\s+.{22}\s+(\d+)\s+(\S+)\s+(.+)$")
    rows = [m.groups() for m in map(row.match, out.splitlines()) if m]
    assert [r[1] for r in rows] == ["genuine", "synthetic"]
    for _, _, windows, peak, alerts in rows:  # AASIST-L: 4.04 s windows, 5 s calls
        assert int(windows) >= 1 and 0.0 <= float(peak) <= 1.0
        assert alerts == "none" or re.fullmatch(r"(elevated|high) at \d+\.\d s", alerts)
