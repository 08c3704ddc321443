"""One detector model per scored dimension (CALLSHIELD_DETECTOR_MODELS).

Fusion keeps one rule (the first model's calibrated threshold) and one N-of-M window
state per call and dimension, so two installed models of one dimension (the shipped CNN
beside an AASIST-lite build, both synthetic_voice) used to be mixed silently, one scored
against the other's threshold. The bridge now refuses to start until the setting picks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.alert_schema import Dimension
from detectors.fixture_models import aasist_fixture, embedding_fixture
from detectors.model_store import ModelSettings, ModelStore
from sip_bridge.wiring import load_detectors, select_models

SV = Dimension.SYNTHETIC_VOICE
KF = Dimension.KNOWN_FRAUDSTER


def test_select_all_when_each_dimension_has_one_model() -> None:
    assert select_models({"b": SV, "a": KF}) == ["a", "b"]
    assert select_models({}) == []


def test_select_refuses_two_models_of_one_dimension() -> None:
    with pytest.raises(ValueError) as exc:
        select_models({"cnn": SV, "lite": SV, "spk": KF})
    text = str(exc.value)
    assert "synthetic_voice: cnn, lite" in text
    assert "CALLSHIELD_DETECTOR_MODELS" in text
    assert "known_fraudster" not in text  # only the clashing dimension is named


def test_select_by_setting() -> None:
    installed = {"cnn": SV, "lite": SV, "spk": KF}
    assert select_models(installed, "lite, spk") == ["lite", "spk"]
    assert select_models(installed, "cnn") == ["cnn"]
    with pytest.raises(ValueError, match="synthetic_voice: cnn, lite"):
        select_models(installed, "cnn,lite")


def test_select_unknown_name_is_an_error() -> None:
    with pytest.raises(ValueError) as exc:
        select_models({"cnn": SV}, "cnn,nosuch")
    assert "CALLSHIELD_DETECTOR_MODELS names nosuch" in str(exc.value)
    assert "installed: cnn" in str(exc.value)


def _install_real(root: Path) -> None:
    """Two real (tiny, random-weight) synthetic_voice ONNX models and a speaker model,
    installed as detectors (not fixtures), with different thresholds."""
    store = ModelStore(root)
    data, manifest = aasist_fixture(tiny=True)
    for name, threshold in (("sv-cnn", 0.4), ("sv-lite", 0.7)):
        store.add_built(
            data,
            manifest.model_copy(
                update={
                    "name": name,
                    "file": f"{name}-0.1.0.onnx",
                    "fixture": False,
                    "thresholds": {"default": threshold},
                }
            ),
        )
    data, manifest = embedding_fixture(tiny=True)
    store.add_built(
        data,
        manifest.model_copy(update={"name": "spk", "file": "spk-0.1.0.onnx", "fixture": False}),
    )


def test_bridge_load_refuses_then_setting_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_real(tmp_path)
    monkeypatch.delenv("CALLSHIELD_DETECTOR_MODELS", raising=False)
    # as `callshield bridge` and `replay` build it: models_dir given, the rest from env
    with pytest.raises(ValueError) as exc:
        load_detectors(ModelSettings(models_dir=tmp_path))
    text = str(exc.value)
    assert "synthetic_voice: sv-cnn, sv-lite" in text
    assert "CALLSHIELD_DETECTOR_MODELS" in text

    monkeypatch.setenv("CALLSHIELD_DETECTOR_MODELS", "sv-lite,spk")
    detectors = load_detectors(ModelSettings(models_dir=tmp_path))
    assert sorted((d.spec.name, d.spec.dimension) for d in detectors) == [
        ("spk", manifest_dimension("spk", tmp_path)),
        ("sv-lite", SV),
    ]
    lite = next(d for d in detectors if d.spec.name == "sv-lite")
    assert lite.spec.threshold == pytest.approx(0.7)

    monkeypatch.setenv("CALLSHIELD_DETECTOR_MODELS", "sv-lite,sv-gone")
    with pytest.raises(ValueError, match="names sv-gone, not an installed detector model"):
        load_detectors(ModelSettings(models_dir=tmp_path))


def test_dev_fixtures_are_not_subject_to_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --dev-fixture-models (demos and tests only) adds its fixtures after the selection
    _install_real(tmp_path)
    monkeypatch.setenv("CALLSHIELD_DETECTOR_MODELS", "sv-cnn")
    names = sorted(d.spec.name for d in load_detectors(ModelSettings(models_dir=tmp_path), "tiny"))
    assert "sv-cnn" in names and "sv-lite" not in names
    assert "aasist-shaped-tiny" in names


def manifest_dimension(name: str, root: Path) -> Dimension:
    return ModelStore(root).get(name).manifest.dimension


def test_bench_capacity_loads_what_the_bridge_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sip_bridge.bench.capacity import _installed

    _install_real(tmp_path)
    monkeypatch.delenv("CALLSHIELD_DETECTOR_MODELS", raising=False)
    with pytest.raises(SystemExit, match="synthetic_voice: sv-cnn, sv-lite"):
        _installed(tmp_path)
    monkeypatch.setenv("CALLSHIELD_DETECTOR_MODELS", "sv-cnn,spk")
    assert sorted(i.manifest.name for i in _installed(tmp_path)) == ["spk", "sv-cnn"]
