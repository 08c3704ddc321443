"""Leave-one-spoof-family-out (issue 10): ``train-synthetic --hold-out-family`` keeps the
family out of training and dev, reports its EER against unseen bona fide speakers, and
never writes over the installed model; a family the build does not have is refused.
Exercised with the ``--quick`` budget (the real table: ``train-synthetic --lofo``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detectors.synthetic import lofo
from detectors.synthetic.dataset import Clip


def _clip(family: str, part: str, label: int) -> Clip:
    return Clip(Path(f"/x/{family}-{part}.wav"), label, part, f"{family}_s", family, family)  # type: ignore[arg-type]


def test_split_keeps_the_family_out_and_evaluates_on_unseen_speakers() -> None:
    clips = [
        _clip(f, p, int(f != "bonafide"))
        for f in ("bonafide", "espeak", "world")
        for p in ("train", "dev", "test")
    ]
    kept, held = lofo.split(clips, "world")
    assert {c.family for c in kept} == {"bonafide", "espeak"}
    assert {(c.family, c.part) for c in held} == {
        ("world", "train"),
        ("world", "dev"),
        ("world", "test"),
        ("bonafide", "dev"),
        ("bonafide", "test"),
    }
    with pytest.raises(ValueError, match="no spoof family 'piper'"):
        lofo.split(clips, "piper")
    with pytest.raises(ValueError, match="not bona fide"):
        lofo.split(clips, "bonafide")


def test_quick_build_holding_out_griffinlim(
    tmp_path: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from detectors.synthetic.build import run_cli

    installed = tmp_path / "models"
    work = tmp_path / "work"
    rc = run_cli(installed, work, shared_dir / "data/speech", 0, True, hold_out="griffinlim")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert not installed.exists()  # never over the installed model
    report = json.loads((work / "lofo-griffinlim" / "report-s0-quick.json").read_text())
    assert ".lofo-griffinlim" in report["model"]
    assert all("griffinlim" not in report["clips"][p] for p in ("train", "dev", "test"))
    held = report["held_out"]
    assert held["family"] == "griffinlim" and held["spoof_clips"] > 0
    assert held["bonafide_clips"] > 0
    pcmu = held["conditions"]["pcmu"]
    assert pcmu["eer"] is not None and 0.0 <= pcmu["eer"] <= 1.0
    assert pcmu["scored"]["spoof"] > 0 and pcmu["scored"]["bonafide"] > 0
    assert "leave-one-spoof-family-out (pcmu)" in out and "griffinlim" in out
    # the spoofs were generated once, in the shared cache, not per held-out build
    assert any(p.name.startswith("gen-") for p in work.iterdir())
    assert not any(p.name.startswith("gen-") for p in (work / "lofo-griffinlim").iterdir())
