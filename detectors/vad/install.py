"""``callshield models install-vad``: copy Silero VAD's ONNX file out of the installed
``silero-vad`` wheel (MIT) into the models directory with a manifest. Nothing is
downloaded and silero-vad itself (which needs torch) is never imported: the package
is located with ``importlib.util.find_spec`` and its licence read from its metadata."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from detectors.alert_schema import Dimension, LegRole
from detectors.manifest import InputSpec, ModelManifest, OutputSpec
from detectors.model_store import Installed, ModelStore
from detectors.vad.silero import CHUNK, CHUNKS_PER_WINDOW, CONTEXT

NAME = "silero-vad"
ONNX_IN_WHEEL = "data/silero_vad.onnx"


class VadInstallError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class VadSource:
    onnx: Path
    version: str
    licence_text: str


def locate() -> VadSource:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VadInstallError("silero-vad is not installed: pip install 'callshield[convert]'")
    onnx = Path(next(iter(spec.submodule_search_locations))) / ONNX_IN_WHEEL
    if not onnx.is_file():
        raise VadInstallError(f"{onnx}: not in the installed silero-vad")
    dist = importlib.metadata.distribution("silero-vad")
    licence = ""
    for f in dist.files or []:
        if "licen" in f.name.lower():
            licence = f.read_text() or ""
            break
    if "MIT License" not in licence:
        raise VadInstallError("silero-vad's licence file is missing or not MIT: not installing")
    return VadSource(onnx, dist.version, licence)


def make_manifest(data: bytes, src: VadSource) -> ModelManifest:
    rate = 8000
    return ModelManifest(
        name=NAME,
        version=src.version,
        dimension=Dimension.SPEECH_ACTIVITY,
        file=f"{NAME}-{src.version}.onnx",
        sha256=hashlib.sha256(data).hexdigest(),
        input=InputSpec(
            name="input",
            sample_rate=rate,
            window=CHUNK[rate] * CHUNKS_PER_WINDOW,
            hop=CHUNK[rate] * CHUNKS_PER_WINDOW,
        ),
        output=OutputSpec(score="output"),
        max_concealed_ratio=1.0,
        roles=(LegRole.EXTERNAL, LegRole.MIXED, LegRole.UNKNOWN),
        thresholds={"default": 0.5},
        provenance=(
            f"copied by callshield models install-vad from silero_vad/{ONNX_IN_WHEEL} of the "
            f"silero-vad {src.version} wheel (PyPI), unmodified"
        ),
        licence="MIT (Copyright (c) 2020-present Silero Team; silero-vad wheel licence file)",
        description=(
            "Stateful: not for OnnxDetector; run with detectors.vad.silero. Inputs: 'input' "
            f"float32 [B, {CONTEXT[8000]}+{CHUNK[8000]}] at 8 kHz or [B, {CONTEXT[16000]}+"
            f"{CHUNK[16000]}] at 16 kHz (the previous chunk's last samples prepended), "
            "'state' float32 [2, B, 128] (zeros at stream start, then the previous 'stateN'), "
            "'sr' int64 scalar 8000|16000. Outputs: 'output' [B, 1] speech probability per "
            f"chunk, 'stateN'. Window = {CHUNKS_PER_WINDOW} chunks; score = mean probability."
        ),
    )


def install_vad(out_dir: Path) -> tuple[Installed, VadSource]:
    src = locate()
    data = src.onnx.read_bytes()
    installed = ModelStore(out_dir).add_built(data, make_manifest(data, src))
    licence_path = out_dir / f"{installed.manifest.key}.LICENSE"
    licence_path.write_text(src.licence_text, encoding="utf-8")
    return installed, src


def run_cli(out_dir: Path) -> int:
    try:
        installed, src = install_vad(out_dir)
    except VadInstallError as exc:
        print(f"error: {exc}")
        return 1
    m = installed.manifest
    print(
        f"installed {m.key} (from {src.onnx}, sha256 {m.sha256[:12]}…, MIT) -> "
        f"{installed.model_path}\n  licence copied to {m.key}.LICENSE; 8 kHz chunks of "
        f"{CHUNK[8000]} samples (+{CONTEXT[8000]} context), 16 kHz {CHUNK[16000]} "
        f"(+{CONTEXT[16000]}), state [2, B, 128]"
    )
    return 0
