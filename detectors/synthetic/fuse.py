"""``callshield models fuse-synthetic``: two synthetic_voice models as one model.

Why one model: the runtime scores one model per dimension (one calibrated threshold and
one N-of-M window state per call and dimension; the bridge refuses two installed
synthetic_voice models, ``sip_bridge.wiring.select_models``), so a score fusion ships as
one ONNX graph. The CNN (log spectrogram) and AASIST-lite (raw waveform) read different
views of a window and fail on different spoof families (docs/models/synthetic_voice.md):
that is the case for fusing them.

The graph: both networks on the same input window, and

    P = sigmoid(w * logit(P_a) + (1 - w) * logit(P_b)),  P_x clipped to [EPS, 1 - EPS]

(``detectors.eval.fusion_study``'s ``logit`` rule, measured offline from two
``callshield eval --per-call`` reports before a fusion is worth building). The build:

    both manifests checked (synthetic_voice, the same input window, rate, hop and net
    speech, P(spoof) out; neither trained on a speaker of the seed's dev or test part) ->
    the fused graph (ONNX checker) -> ONNX Runtime: fused output vs the formula on both
    models' own outputs over real dev windows (max |Δ P| <= 1e-5) -> the seed's dev part
    scored by the build's own rule (``build.dev_report``: thresholds per codec) ->
    manifest -> the models directory, and a report in the work directory.

The spoofs of the seed's dev part come from the work directory of the builds
(``train-synthetic --work``), generated there if missing. torch is not needed; the
``onnx`` package is (the ``dev`` or ``convert`` extra). Nothing here runs at run time.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from detectors.alert_schema import Dimension
from detectors.eval import fusion_study
from detectors.eval.fusion_study import EPS
from detectors.manifest import ModelManifest
from detectors.model_store import Installed, ModelStore
from detectors.synthetic import corpus, dataset, train
from detectors.synthetic.build import (
    INPUT_NAME,
    OUTPUT_NAME,
    TOLERANCE,
    VERSION,
    BuildError,
    corpus_clips,
    default_speech_dir,
    default_work_dir,
    dev_report,
    ort_session,
    print_dev,
)
from detectors.synthetic.train import FloatArray

FUSED_NAME = "callshield-synthetic-fused-8k"


def fuse_graphs(a: bytes, b: bytes, weight: float) -> bytes:
    """One ONNX graph: input ``waveform`` to both models, output ``p_spoof`` fused."""
    import onnx
    from onnx import TensorProto, compose, helper

    if not 0.0 <= weight <= 1.0:
        raise BuildError(f"the fusion weight must be in [0, 1], not {weight}")
    ma, mb = onnx.load_from_string(a), onnx.load_from_string(b)
    for name, m in (("a", ma), ("b", mb)):
        inits = {i.name for i in m.graph.initializer}
        ins = [i.name for i in m.graph.input if i.name not in inits]
        outs = [o.name for o in m.graph.output]
        if ins != [INPUT_NAME] or outs != [OUTPUT_NAME]:
            raise BuildError(
                f"model {name}: inputs {ins} / outputs {outs}, expected "
                f"[{INPUT_NAME!r}] / [{OUTPUT_NAME!r}] (a synthetic_voice model built here)"
            )
    opsets: dict[str, int] = {}
    for m in (ma, mb):
        for op in m.opset_import:
            opsets[op.domain] = max(opsets.get(op.domain, 0), op.version)
    pa, pb = compose.add_prefix(ma, "a/"), compose.add_prefix(mb, "b/")
    k = "fuse/"
    consts = [
        helper.make_tensor(k + n, TensorProto.FLOAT, [], [v])
        for n, v in (("lo", EPS), ("hi", 1 - EPS), ("one", 1.0), ("wa", weight))
    ]
    consts.append(helper.make_tensor(k + "wb", TensorProto.FLOAT, [], [1.0 - weight]))
    nodes = [
        helper.make_node("Identity", [INPUT_NAME], ["a/" + INPUT_NAME]),
        helper.make_node("Identity", [INPUT_NAME], ["b/" + INPUT_NAME]),
        *pa.graph.node,
        *pb.graph.node,
    ]
    for x in ("a", "b"):  # logit of the clipped P, weighted
        p = f"{x}/{OUTPUT_NAME}"
        nodes += [
            helper.make_node("Clip", [p, k + "lo", k + "hi"], [k + x + "_p"]),
            helper.make_node("Sub", [k + "one", k + x + "_p"], [k + x + "_q"]),
            helper.make_node("Div", [k + x + "_p", k + x + "_q"], [k + x + "_odds"]),
            helper.make_node("Log", [k + x + "_odds"], [k + x + "_logit"]),
            helper.make_node("Mul", [k + x + "_logit", k + "w" + x], [k + x + "_z"]),
        ]
    nodes += [
        helper.make_node("Add", [k + "a_z", k + "b_z"], [k + "z"]),
        helper.make_node("Sigmoid", [k + "z"], [OUTPUT_NAME]),
    ]
    (inp,) = [i for i in ma.graph.input if i.name == INPUT_NAME]
    (out,) = list(ma.graph.output)
    graph = helper.make_graph(
        nodes,
        "callshield_synthetic_fused",
        [inp],
        [out],
        initializer=[*pa.graph.initializer, *pb.graph.initializer, *consts],
        value_info=[*pa.graph.value_info, *pb.graph.value_info],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
        producer_name="callshield models fuse-synthetic",
    )
    model.ir_version = max(ma.ir_version, mb.ir_version)
    model.functions.extend([*pa.functions, *pb.functions])
    onnx.checker.check_model(model)
    out_bytes: bytes = model.SerializeToString()
    return out_bytes


def check_pair(a: ModelManifest, b: ModelManifest) -> None:
    """Both synthetic_voice models scoring the same windows, P(spoof) out."""
    for m in (a, b):
        if m.dimension is not Dimension.SYNTHETIC_VOICE:
            raise BuildError(f"{m.key} scores {m.dimension.value}, not synthetic_voice")
        if m.output.score_transform != "identity":
            raise BuildError(f"{m.key}: score transform {m.output.score_transform}, not P(spoof)")
    same = (a.input.sample_rate, a.input.window, a.input.hop, a.min_net_speech_s)
    other = (b.input.sample_rate, b.input.window, b.input.hop, b.min_net_speech_s)
    if same != other:
        raise BuildError(
            f"{a.key} and {b.key} cut different windows (rate, window, hop, net speech: "
            f"{same} vs {other}); a fused model scores one window with both"
        )


def check_split(a: ModelManifest, b: ModelManifest, speech_dir: Path, seed: int) -> None:
    """Neither model trained on a speaker the seed's dev or test part holds: the
    thresholds come from dev, and test is what a user measures the fusion on."""
    speakers = {u.speaker for u in corpus.load_corpus(speech_dir) if u.label == "bonafide"}
    split = corpus.split_speakers(speakers, seed)
    held = split["dev"] | split["test"]
    for m in (a, b):
        seen = sorted(set(m.training_speakers) & held)
        if seen:
            raise BuildError(
                f"{m.key} was trained on {len(seen)} speakers of seed {seed}'s dev/test "
                f"part (e.g. {', '.join(seen[:3])}): fuse models built with --seed {seed}"
            )


def build_fused(
    a: Installed,
    b: Installed,
    weight: float,
    out_dir: Path,
    work: Path,
    speech_dir: Path,
    seed: int,
    quick: bool = False,
    progress: Any = None,
) -> tuple[Installed, dict[str, Any]]:
    say = progress or (lambda msg: None)
    started = time.monotonic()
    check_pair(a.manifest, b.manifest)
    check_split(a.manifest, b.manifest, speech_dir, seed)
    a_bytes, b_bytes = a.model_path.read_bytes(), b.model_path.read_bytes()
    fused = fuse_graphs(a_bytes, b_bytes, weight)
    session, sa, sb = ort_session(fused), ort_session(a_bytes), ort_session(b_bytes)
    _, clips, _ = corpus_clips(speech_dir, work, seed, quick, (), say)
    dev = [c for c in clips if c.part == "dev"]
    if not {c.label for c in dev} >= {0, 1}:
        raise BuildError(f"seed {seed}'s dev part needs bona fide and spoof clips")
    audio = dataset.load_8k(dev)
    check = np.concatenate([train.runtime_windows(x) for x in audio[:16]]).astype(np.float32)
    if not len(check):
        raise BuildError("no dev window to check the fused graph on")

    def run(s: Any) -> FloatArray:
        out: FloatArray = s.run([OUTPUT_NAME], {INPUT_NAME: check})[0].reshape(-1)
        return out

    want = fusion_study.fuse(run(sa), run(sb), "logit", weight)  # the study's rule
    diff = float(np.max(np.abs(run(session) - want)))
    if not diff <= TOLERANCE:
        raise BuildError(f"fused graph differs from the formula by {diff:.3g} > {TOLERANCE}")
    say(f"fused graph checked on {len(check)} dev windows: max |Δ P| {diff:.1e}")
    report, thresholds = dev_report(session, dev, audio, seed)
    ma, mb = a.manifest, b.manifest
    digest = hashlib.sha256(fused).hexdigest()
    version = f"{VERSION}{'-quick' if quick else ''}+s{seed}.w{round(weight * 100):03d}"
    provenance = (
        f"fused by callshield models fuse-synthetic: P = sigmoid(w logit(P_a) + (1 - w) "
        f"logit(P_b)), w = {weight:g}, P clipped to [{EPS:g}, 1 - {EPS:g}]; a = {ma.key} "
        f"(sha256 {ma.sha256[:12]}), b = {mb.key} (sha256 {mb.sha256[:12]}); thresholds "
        f"from seed {seed}'s dev part (the build's rule); max |ONNX Runtime - formula| "
        f"{diff:.1e} over {len(check)} dev windows. a: {ma.provenance} || b: {mb.provenance}"
    )
    manifest = ModelManifest(
        name=FUSED_NAME,
        version=version,
        dimension=Dimension.SYNTHETIC_VOICE,
        file=f"{FUSED_NAME}-{version}.onnx",
        sha256=digest,
        input=ma.input,
        output=ma.output,
        min_net_speech_s=ma.min_net_speech_s,
        max_concealed_ratio=min(ma.max_concealed_ratio, mb.max_concealed_ratio),
        roles=ma.roles,
        batchable=ma.batchable and mb.batchable,
        thresholds={k: round(min(1.0, v), 6) for k, v in thresholds.items()},
        provenance=provenance,
        licence=ma.licence if ma.licence == mb.licence else f"{ma.licence}; {mb.licence}",
        training_speakers=tuple(sorted(set(ma.training_speakers) | set(mb.training_speakers))),
        description=(
            ("QUICK BUILD (test only, not a detector): " if quick else "")
            + f"Score fusion of two synthetic_voice models in one graph ({ma.name} and "
            f"{mb.name}, weight {weight:g} on the first): the mean of their logits, "
            "P(spoof) out, 3 s windows at 8 kHz. See docs/models/synthetic_voice.md."
        ),
    )
    installed = ModelStore(out_dir).add_built(fused, manifest)
    result = {
        "model": installed.manifest.key,
        "installed": str(installed.model_path),
        "a": ma.key,
        "b": mb.key,
        "weight": weight,
        "seed": seed,
        "quick": quick,
        "max_abs_diff": diff,
        "dev": report,
        "thresholds": installed.manifest.thresholds,
        "total_seconds": round(time.monotonic() - started, 1),
    }
    name = f"report-s{seed}{'-quick' if quick else ''}-fused-w{round(weight * 100):03d}.json"
    (work / name).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return installed, result


def _model(spec: list[str]) -> Installed:
    folder, name = Path(spec[0]), spec[1]
    try:
        return ModelStore(folder).get(name)
    except (LookupError, ValueError) as exc:
        raise BuildError(f"no model {name} in {folder}: {exc}") from exc


def run_cli(
    a: list[str],
    b: list[str],
    weight: float,
    out_dir: Path,
    work: Path | None,
    speech_dir: Path | None,
    seed: int,
    quick: bool = False,
) -> int:
    work = work or default_work_dir()
    speech_dir = speech_dir or default_speech_dir()
    work.mkdir(parents=True, exist_ok=True)
    try:
        installed, report = build_fused(
            _model(a), _model(b), weight, out_dir, work, speech_dir, seed, quick,
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )  # fmt: skip
    except (BuildError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    print(f"installed {installed.manifest.key} -> {installed.model_path}")
    print(f"  fused graph vs formula max |Δ P(spoof)| {report['max_abs_diff']:.1e}")
    print_dev(report)
    testset = work / f"testset-s{seed}{'-quick' if quick else ''}"
    print(
        f"  measure it: callshield eval {testset} --models-dir {out_dir} "
        f"--detector {FUSED_NAME} --by-family"
    )
    return 0
