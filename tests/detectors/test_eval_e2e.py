"""``callshield eval`` end to end on a few real files with the tiny runtime fixture
model: the pipeline runs per condition, the output has its documented structure, the
values are sane and reproducible, and training speakers are excluded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.eval.audio import read_audio, resample
from detectors.manifest import ModelManifest
from detectors.model_store import ModelStore
from sip_bridge.cli import main

Built = tuple[bytes, ModelManifest]


@pytest.fixture(scope="module")
def eval_dir(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    speech = shared_dir / "data/speech"
    root = tmp_path_factory.mktemp("evaldir")
    picks = {
        "bonafide/asterisk_en": sorted((speech / "asterisk_prompts/en").glob("*.wav"))[:2],
        "bonafide/osr": sorted((speech / "osr").glob("*.wav"))[:1],
        "bonafide/ljspeech": sorted((speech / "ljspeech/wavs").glob("*.flac"))[:1],
        "spoof/gemini_a": sorted((speech / "gemini_tts_es_mx").rglob("*.wav"))[:1],
        "spoof/gemini_b": sorted((speech / "gemini_tts_es_mx").rglob("*.wav"))[1:2],
    }
    for sub, files in picks.items():
        if not files:
            pytest.skip(f"no audio for {sub} in {speech}")
        (root / sub).mkdir(parents=True)
        for f in files:
            (root / sub / f.name).symlink_to(f)
    return root


def _models(tmp: Path, built: Built, training: tuple[str, ...] = ()) -> Path:
    data, manifest = built
    if training:
        manifest = manifest.model_copy(update={"training_speakers": training})
    ModelStore(tmp).add_built(data, manifest)
    return tmp


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["eval", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_eval_runs_every_condition(
    eval_dir: Path, tmp_path: Path, tiny_aasist: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models(tmp_path / "m", tiny_aasist)
    args = (str(eval_dir), "--models-dir", str(models), "--per-call")
    report = _run(capsys, *args)
    assert report["dataset"] == {"dir": str(eval_dir), "calls": 6, "files": 6, "speakers": 5}
    [det] = report["detectors"]
    assert det["name"] == tiny_aasist[1].name and det["fixture"] is True
    assert set(det["conditions"]) == {"clean", "g711", "g711_loss5"}
    for cond, r in det["conditions"].items():
        assert r["calls"] == {"bonafide": 4, "spoof": 2}, cond
        assert r["speakers"] == {"bonafide": 3, "spoof": 2}
        assert r["scored_calls"] == {"bonafide": 4, "spoof": 2}  # all longer than 0.5 s
        assert 0.0 <= r["eer"] <= 1.0
        assert r["threshold"] == 0.5
        for k in ("false_alarm_rate", "miss_rate", "false_alerts_per_call", "missed_calls"):
            assert 0.0 <= r[k] <= 1.0
        assert r["windows"]["scored"] > 50
        # the fixture scores real speech far below its 0.5 threshold: nothing is flagged
        assert r["false_alarm_rate"] == 0.0 and r["false_alerts_per_call"] == 0.0
    # loss is concealed: some windows of the lossy condition carry concealment, and the
    # clean condition has no telephone channel at all
    calls = det["calls"]
    assert set(calls["clean"]) == set(calls["g711_loss5"])
    # reproducible: the same seeded loss, the same windows and (within float noise) scores
    again = _run(capsys, *args)["detectors"][0]
    for cond in det["conditions"]:
        a, b = det["conditions"][cond], again["conditions"][cond]
        assert a["windows"] == b["windows"] and a["calls"] == b["calls"]
        for cid, c in det["calls"][cond].items():
            assert c["score"] == pytest.approx(again["calls"][cond][cid]["score"], abs=1e-5)


def test_training_speakers_are_excluded_and_split_holds(
    eval_dir: Path, tmp_path: Path, tiny_aasist: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models(tmp_path / "m", tiny_aasist, training=("osr", "gemini_a"))
    report = _run(
        capsys,
        str(eval_dir),
        "--models-dir",
        str(models),
        "--conditions",
        "g711",
        "--heldout-speakers",
        "asterisk_en,gemini_b,osr",
        "--per-call",
    )
    [det] = report["detectors"]
    assert det["excluded_training_speakers"] == 2
    r = det["conditions"]["g711"]
    assert r["speakers"] == {"bonafide": 1, "spoof": 1}
    assert r["calls"] == {"bonafide": 2, "spoof": 1}
    assert "calibrated" not in r  # the calibration part (ljspeech) has no spoof
    parts = {c["speaker"]: c["part"] for c in det["calls"]["g711"].values()}
    assert parts["osr"] is None and parts["gemini_a"] is None
    assert parts["asterisk_en"] == "test" and parts["ljspeech"] == "calib"


def test_calls_per_speaker_join_files(
    eval_dir: Path, tmp_path: Path, tiny_aasist: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models(tmp_path / "m", tiny_aasist)
    report = _run(
        capsys,
        str(eval_dir),
        "--models-dir",
        str(models),
        "--conditions",
        "clean",
        "--calls",
        "speaker",
    )
    assert report["dataset"]["calls"] == 5
    assert report["detectors"][0]["conditions"]["clean"]["calls"] == {"bonafide": 3, "spoof": 2}


def test_unknown_condition_and_missing_model_are_errors(
    eval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(eval_dir), "--models-dir", str(tmp_path), "--conditions", "gsm"]) == 2
    assert main(["eval", str(eval_dir), "--models-dir", str(tmp_path)]) == 2
    assert "no synthetic_voice model" in capsys.readouterr().err


def test_read_flac_and_resample(eval_dir: Path) -> None:
    [flac] = list((eval_dir / "bonafide/ljspeech").iterdir())
    x, rate = read_audio(flac)
    assert rate == 22050 and x.dtype == np.float32 and 0.01 < float(np.abs(x).max()) <= 1.0
    y = resample(x, rate, 8000)
    assert len(y) == len(x) * 8000 // rate
    t = np.arange(16000) / 16000
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    down = resample(tone, 16000, 8000)
    ref = np.sin(2 * np.pi * 1000 * np.arange(8000) / 8000)
    assert np.max(np.abs(down[200:-200] - ref[200:-200])) < 0.01  # aligned, no group delay
