"""`callshield demo` end to end: real UDP, relays, the ingest thread, the report."""

from __future__ import annotations

import re

import pytest

from sip_bridge.cli import main


def test_demo_reports_every_leg_and_clean_audio_arrives_intact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--seconds", "2", "--calls", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("call ")]
    assert len(rows) == 4
    clean = [r for r in rows if "(clean)" in r]
    assert len(clean) == 2
    for row in clean:
        fields = row.split(")")[1].split()
        received, lost, late = int(fields[0]), int(fields[1]), int(fields[2])
        assert received >= 95 and lost == 0 and late == 0
        assert fields[-1] == "100.0%"  # every real sample is the one that was sent
    lossy = [r for r in rows if "(2% loss)" in r]
    assert all(re.search(r"\d+\.\d+%$", r) for r in lossy)
    assert "arrival (kernel timestamp) -> jitter buffer" in out
