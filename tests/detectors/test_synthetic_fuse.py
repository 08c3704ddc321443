"""``callshield models fuse-synthetic``: two synthetic_voice models as one ONNX graph.

The graph is checked against the formula on small real ONNX models, and end to end on
the quick build of the shared corpus: fused with itself a model must keep its scores and
its dev thresholds (the mean of two equal logits is that logit), installed beside it
under its own name; models that cut other windows, or trained on a speaker of the
seed's dev part, are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from detectors.eval.fusion_study import fuse
from detectors.model_store import ModelStore
from detectors.synthetic.build import INPUT_NAME, OUTPUT_NAME, BuildError, build
from detectors.synthetic.fuse import (
    FUSED_NAME,
    check_pair,
    check_split,
    fuse_graphs,
)
from sip_bridge.cli import main


def _tiny(op: str, gain: float) -> bytes:
    """P = sigmoid(gain * op(x over the window)): a model with the synthetic_voice I/O."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node(op, [INPUT_NAME], ["r"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["r", "g"], ["z"]),
        helper.make_node("Sigmoid", ["z"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch"])],
        initializer=[helper.make_tensor("g", TensorProto.FLOAT, [], [gain])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out: bytes = model.SerializeToString()
    return out


def _run(model: bytes, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    out: np.ndarray = s.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
    return out


@pytest.mark.parametrize("weight", [0.5, 0.25, 1.0])
def test_fused_graph_is_the_weighted_logit_mean_of_its_two_models(weight: float) -> None:
    a, b = _tiny("ReduceMean", 3.0), _tiny("ReduceMax", -2.0)
    fused = fuse_graphs(a, b, weight)
    rng = np.random.default_rng(0)
    for batch in (1, 5):  # the batch stays dynamic
        x = rng.normal(size=(batch, 16)).astype(np.float32)
        pa, pb = _run(a, x), _run(b, x)
        got = _run(fused, x)
        assert got.shape == (batch,)
        np.testing.assert_allclose(got, fuse(pa, pb, "logit", weight), atol=1e-6)
        za, zb = np.log(pa / (1 - pa)), np.log(pb / (1 - pb))
        want = 1 / (1 + np.exp(-(weight * za + (1 - weight) * zb)))
        np.testing.assert_allclose(got, want, atol=1e-5)
    if weight == 1.0:  # all weight on the first model: its own scores
        np.testing.assert_allclose(got, pa, atol=1e-5)


def test_graphs_without_the_synthetic_voice_io_or_weights_out_of_range_are_refused() -> None:
    a = _tiny("ReduceMean", 1.0)
    with pytest.raises(BuildError, match="weight"):
        fuse_graphs(a, a, 1.5)
    renamed = a.replace(OUTPUT_NAME.encode(), b"p_other")
    with pytest.raises(BuildError, match="outputs"):
        fuse_graphs(a, renamed, 0.5)


@pytest.fixture(scope="module")
def quick_cnn(
    tmp_path_factory: pytest.TempPathFactory, shared_dir: Path, synthetic_quick_work: Path
) -> Any:
    root = tmp_path_factory.mktemp("fuse")
    return build(root / "models", synthetic_quick_work, shared_dir / "data/speech", 0, quick=True)


def test_a_model_fused_with_itself_keeps_its_scores_and_thresholds(
    quick_cnn: Any,
    tmp_path: Path,
    shared_dir: Path,
    synthetic_quick_work: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cnn = quick_cnn.installed
    folder, name = str(cnn.model_path.parent), cnn.manifest.name
    out = tmp_path / "fused"
    argv = ["models", "--models-dir", str(out), "fuse-synthetic", "--a", folder, name]
    argv += ["--b", folder, name, "--quick", "--work", str(synthetic_quick_work)]
    argv += ["--speech-dir", str(shared_dir / "data/speech")]
    assert main(argv) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out
    assert f"installed {FUSED_NAME}-" in printed and "measure it: callshield eval" in printed
    fused = ModelStore(out).get(FUSED_NAME)  # sha256 verified
    m = fused.manifest
    assert m.dimension is cnn.manifest.dimension and m.input == cnn.manifest.input
    assert set(m.thresholds) == set(cnn.manifest.thresholds)
    for codec, thr in cnn.manifest.thresholds.items():
        assert abs(m.thresholds[codec] - thr) <= 1e-5, (codec, m.thresholds, thr)
    assert cnn.manifest.key in m.provenance and "w = 0.5" in m.provenance
    assert "QUICK BUILD" in m.description and m.licence == cnn.manifest.licence
    assert set(m.training_speakers) == set(cnn.manifest.training_speakers)
    rng = np.random.default_rng(1)
    x = (0.1 * rng.normal(size=(3, m.input.window))).astype(np.float32)
    np.testing.assert_allclose(
        _run(fused.model_path.read_bytes(), x), _run(cnn.model_path.read_bytes(), x), atol=1e-5
    )
    reports = list(synthetic_quick_work.glob("report-s0-quick-fused-w050.json"))
    assert reports, "the fused build writes its report into the work directory"


def test_models_that_cut_other_windows_or_saw_dev_speakers_are_refused(
    quick_cnn: Any, shared_dir: Path
) -> None:
    m = quick_cnn.installed.manifest
    check_pair(m, m)
    other = m.model_copy(update={"input": m.input.model_copy(update={"hop": m.input.hop // 2})})
    with pytest.raises(BuildError, match="different windows"):
        check_pair(m, other)
    speech = shared_dir / "data/speech"
    check_split(m, m, speech, 0)
    # osr_us_000_0034 is pinned to dev at every seed (detectors/synthetic/corpus.py)
    leaked = m.model_copy(update={"training_speakers": (*m.training_speakers, "osr_us_000_0034")})
    with pytest.raises(BuildError, match="dev/test"):
        check_split(m, leaked, speech, 0)
