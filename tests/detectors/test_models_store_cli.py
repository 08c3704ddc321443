"""Manifests, the models directory (sha256 on install and load) and `callshield models`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Built

from detectors.manifest import ModelManifest, load_manifest
from detectors.model_store import ModelStore
from sip_bridge.cli import main


def test_manifest_validation_and_spec(tiny_aasist: Built) -> None:
    _, m = tiny_aasist
    spec = m.detector_spec("PCMU")
    assert spec.sample_rate == 16000 and spec.window == m.input.window
    assert spec.threshold == m.thresholds["pcmu"] and m.fixture
    bad = m.model_dump() | {"thresholds": {"pcmu": 0.5}}
    with pytest.raises(ValueError, match="default"):
        ModelManifest.model_validate(bad)
    with pytest.raises(ValueError):
        ModelManifest.model_validate(m.model_dump() | {"sha256": "xyz"})


def test_install_verify_get_and_tamper(tmp_path: Path, tiny_aasist: Built) -> None:
    data, m = tiny_aasist
    store = ModelStore(tmp_path / "models")
    installed = store.add_built(data, m)
    assert installed.model_path.read_bytes() == data
    assert load_manifest(installed.manifest_path) == m
    assert [c.ok for c in store.verify()] == [True]
    assert store.get(m.name).model_path == installed.model_path
    installed.model_path.write_bytes(data[:-1] + b"\0")
    assert [c.ok for c in store.verify()] == [False]
    with pytest.raises(ValueError, match="sha256 mismatch"):
        store.get(m.name)
    with pytest.raises(LookupError):
        store.get("nope")


def test_install_refuses_a_file_that_does_not_match(tmp_path: Path, tiny_aasist: Built) -> None:
    data, m = tiny_aasist
    src = tmp_path / m.file
    src.write_bytes(data + b"x")
    (tmp_path / f"{m.key}.manifest.json").write_text(json.dumps(m.model_dump(mode="json")))
    with pytest.raises(ValueError, match="refusing"):
        ModelStore(tmp_path / "models").install(src)
    assert not (tmp_path / "models" / m.file).exists()


def test_cli_build_list_verify_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models"
    assert main(["models", "--models-dir", str(models), "build-fixtures", "--tiny"]) == 0
    assert main(["models", "--models-dir", str(models), "list", "--json"]) == 0
    out = capsys.readouterr().out
    listing = json.loads(out[out.index("{") :])
    names = {r["name"] for r in listing["models"]}
    assert names == {"aasist-shaped-tiny", "embedding-fixture-tiny", "energy-vad"}
    assert all(r["fixture"] for r in listing["models"])
    assert main(["models", "--models-dir", str(models), "verify"]) == 0
    other = tmp_path / "other"
    onnx = models / "energy-vad-0.1.0.onnx"
    assert main(["models", "--models-dir", str(other), "install", str(onnx)]) == 0
    assert (other / "energy-vad-0.1.0.onnx").read_bytes() == onnx.read_bytes()
    onnx.write_bytes(b"corrupt")
    assert main(["models", "--models-dir", str(models), "verify"]) == 1
    assert "BAD energy-vad-0.1.0" in capsys.readouterr().out
