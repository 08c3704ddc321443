"""``callshield models import-aasist``: convert a user's official AASIST / AASIST-L
checkpoint (the authors' MIT release) into an ONNX model detector.

    checkpoint (state dict) -> our implementation (detectors.aasist.torch_model),
    load_state_dict(strict=True) -> torch.onnx export (opset 17, dynamic batch,
    fixed 64,600-sample input) -> ONNX Runtime (CPU) vs the PyTorch forward pass of
    the same module on several inputs, max |Δ logits| ≤ 1e-4, and batch-1 vs batch-N
    -> manifest (spoof probability = softmax(logits)[0]) -> the models directory.

torch (the ``convert`` extra) is imported inside the functions: this module imports
without it, and the runtime never needs it. Nothing converted from a checkpoint is part
of this repository: users bring their own copy.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.aasist.config import SAMPLE_RATE, VARIANTS, WINDOW, AasistConfig
from detectors.alert_schema import Dimension, LegRole
from detectors.manifest import InputSpec, ModelManifest, OutputSpec, sha256_file
from detectors.model_store import Installed, ModelStore

OPSET = 17  # onnxruntime >= 1.14 runs it; the legacy exporter's well-trodden opset
TOLERANCE = 1e-4  # max |ONNX Runtime - PyTorch| on the logits
HOP = 32_000  # 2 s between window starts (50 % overlap at 16 kHz)
INPUT_NAME = "waveform"
OUTPUT_NAME = "logits"
VERSION = "1.0.0"
LICENCE = "MIT (AASIST checkpoint © NAVER Corp.; the user's own copy)"

FloatArray = npt.NDArray[np.float32]


class ConversionError(ValueError):
    """The checkpoint does not fit the architecture, or the export does not verify."""


@dataclass(frozen=True, slots=True)
class ImportResult:
    installed: Installed
    variant: str
    parameters: int
    max_abs_diff: float  # ONNX Runtime vs PyTorch, over every verification input
    batch_diff: float  # ONNX Runtime batch-1 vs batch-N
    inputs: int
    checkpoint_sha256: str


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def load_state_dict(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's tensors (``weights_only``: no code from the file runs)."""
    import torch

    obj = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]
    if not isinstance(obj, dict) or not obj:
        raise ConversionError(f"{checkpoint}: not a PyTorch state dict")
    return dict(obj)


def detect_variant(state: dict[str, Any]) -> str:
    """AASIST or AASIST-L, from the encoder width (the positional embedding's size)."""
    pos = state.get("pos_S")
    if pos is None:
        raise ConversionError("no 'pos_S' tensor: not an AASIST checkpoint")
    width = int(pos.shape[-1])
    for name, cfg in VARIANTS.items():
        if cfg.encoder_dim == width:
            return name
    raise ConversionError(f"encoder width {width} matches no published AASIST variant")


def build_loaded(state: dict[str, Any], cfg: AasistConfig) -> Any:
    """Our module for ``cfg`` with the checkpoint loaded, strictly: every tensor of the
    checkpoint is used and none of the module's is left unset."""
    from detectors.aasist.torch_model import build_model

    model = build_model(cfg)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ConversionError(f"checkpoint does not fit {cfg.variant}: {exc}") from exc
    model.eval()
    return model


def export_onnx(model: Any, cfg: AasistConfig) -> bytes:
    import torch

    dummy = torch.zeros(2, cfg.nb_samp, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), warnings.catch_warnings():
        # torch >= 2.9 deprecates the TorchScript exporter; it is the one that handles this
        # graph (top-k, gather) without onnxscript, and its output is verified below.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (dummy,),
            path := Path(tmp) / "model.onnx",
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
        return path.read_bytes()


def torch_logits(model: Any, audio: FloatArray) -> FloatArray:
    import torch

    with torch.no_grad():
        out = model(torch.from_numpy(np.ascontiguousarray(audio, np.float32)))
    result: FloatArray = out.numpy().astype(np.float32)
    return result


def ort_session(model: bytes | Path, threads: int = 1) -> Any:
    import onnxruntime as ort

    from detectors.onnx_detector import session_options

    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(
        source, session_options(threads), providers=["CPUExecutionProvider"]
    )


def verification_inputs(n: int = 4, seed: int = 0) -> FloatArray:
    """Deterministic test windows when no audio is given: silence-level noise, speech-
    level noise, a 100 Hz–7 kHz chirp, and clipped loud noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(WINDOW) / SAMPLE_RATE
    dur = WINDOW / SAMPLE_RATE
    chirp = 0.3 * np.sin(2 * np.pi * (100 * t + (7000 - 100) / (2 * dur) * t**2))
    rows = [
        1e-4 * rng.standard_normal(WINDOW),
        0.05 * rng.standard_normal(WINDOW),
        chirp,
        np.clip(0.8 * rng.standard_normal(WINDOW), -1, 1),
    ]
    while len(rows) < n:
        rows.append(0.1 * rng.standard_normal(WINDOW))
    return np.stack(rows[:n]).astype(np.float32)


def verify(model: Any, onnx_bytes: bytes, audio: FloatArray) -> tuple[float, float]:
    """(max |ORT - torch| over the batch, max |ORT batch-1 - ORT batch-N|)."""
    session = ort_session(onnx_bytes)
    ref = torch_logits(model, audio)
    got = np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: audio})[0], np.float32)
    singles = np.concatenate(
        [
            np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: audio[i : i + 1]})[0])
            for i in range(len(audio))
        ]
    )
    diff = float(np.max(np.abs(got - ref)))
    diff_single = float(np.max(np.abs(singles - ref)))
    return max(diff, diff_single), float(np.max(np.abs(singles - got)))


def make_manifest(
    onnx_bytes: bytes, cfg: AasistConfig, checkpoint: Path, sha: str, diff: float, n: int
) -> ModelManifest:
    import hashlib

    name = cfg.variant.lower()
    version = f"{VERSION}+{sha[:12]}"
    return ModelManifest(
        name=name,
        version=version,
        dimension=Dimension.SYNTHETIC_VOICE,
        file=f"{name}-{version}.onnx",
        sha256=hashlib.sha256(onnx_bytes).hexdigest(),
        input=InputSpec(name=INPUT_NAME, sample_rate=SAMPLE_RATE, window=cfg.nb_samp, hop=HOP),
        # logits [spoof, bona fide]: the risk score is softmax(...)[0], P(spoof).
        output=OutputSpec(score=OUTPUT_NAME, score_transform="softmax", score_index=0),
        min_net_speech_s=2.0,
        roles=(LegRole.EXTERNAL,),
        thresholds={"default": 0.5},
        provenance=(
            f"converted by callshield models import-aasist from {checkpoint.name} "
            f"(checkpoint sha256 {sha}); architecture: CallShield's implementation of "
            f"{cfg.variant} (Jung et al., ICASSP 2022, detectors/aasist/torch_model.py), "
            f"state dict loaded strictly; ONNX opset {OPSET}; max |ONNX Runtime - PyTorch| "
            f"on the logits {diff:.2e} over {n} windows"
        ),
        licence=LICENCE,
        description=(
            f"{cfg.variant}: raw 16 kHz waveform, {cfg.nb_samp} samples "
            f"(≈{cfg.nb_samp / SAMPLE_RATE:.2f} s) per window; score = P(spoof). Trained by "
            "its authors on ASVspoof 2019 LA (clean 16 kHz, VCTK speakers) only: 8 kHz "
            "telephone audio (upsampled) is outside what it saw, and far-from-domain real "
            "speech is often scored as spoof. The 0.5 default is not calibrated: set "
            "per-codec thresholds in policy from your own labelled calls."
        ),
    )


def import_aasist(
    checkpoint: Path,
    out_dir: Path,
    variant: str | None = None,
    verify_audio: FloatArray | None = None,
) -> ImportResult:
    """Convert, verify and install into ``out_dir``; raises ConversionError."""
    state = load_state_dict(checkpoint)
    found = detect_variant(state)
    if variant is not None and variant != found:
        raise ConversionError(f"{checkpoint.name} holds an {found} checkpoint, not {variant}")
    cfg = VARIANTS[found]
    model = build_loaded(state, cfg)
    params = sum(int(p.numel()) for p in model.parameters())
    onnx_bytes = export_onnx(model, cfg)
    audio = verification_inputs() if verify_audio is None else verify_audio
    diff, batch_diff = verify(model, onnx_bytes, np.asarray(audio, np.float32))
    if not diff <= TOLERANCE:
        raise ConversionError(f"ONNX output differs from PyTorch by {diff:.3g} > {TOLERANCE}")
    sha = sha256_file(checkpoint)
    manifest = make_manifest(onnx_bytes, cfg, checkpoint, sha, diff, len(audio))
    installed = ModelStore(out_dir).add_built(onnx_bytes, manifest)
    return ImportResult(installed, found, params, diff, batch_diff, len(audio), sha)


def run_cli(checkpoint: Path, out_dir: Path, variant: str | None) -> int:
    if not torch_available():
        print("error: import-aasist needs torch (offline only): pip install 'callshield[convert]'")
        return 2
    if not checkpoint.is_file():
        print(f"error: {checkpoint}: no such file")
        return 1
    started = time.monotonic()
    try:
        result = import_aasist(checkpoint, out_dir, variant)
    except ConversionError as exc:
        print(f"error: {exc}")
        return 1
    m = result.installed.manifest
    print(
        f"imported {result.variant} ({result.parameters:,} parameters, state dict loaded "
        f"strictly) -> {result.installed.model_path}\n"
        f"  verified: max |ONNX Runtime - PyTorch| = {result.max_abs_diff:.2e} on "
        f"{result.inputs} windows (tolerance {TOLERANCE:g}); batch-1 vs batch-N "
        f"{result.batch_diff:.2e}\n"
        f"  manifest {result.installed.manifest_path.name}: {m.dimension.value}, score P(spoof), "
        f"threshold {m.thresholds['default']} (uncalibrated)\n"
        f"  took {time.monotonic() - started:.1f} s"
    )
    return 0
