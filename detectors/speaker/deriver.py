"""``callshield models derive-speaker``: derive the speaker-embedding ONNX model from the
voice-encoder weights the ``resemblyzer`` wheel ships (``resemblyzer/pretrained.pt``,
Apache-2.0), through CallShield's own implementation of the published architecture.

    pretrained.pt (torch.load weights_only) -> model_state minus the GE2E similarity
    scalars -> detectors.speaker.torch_model (load_state_dict strict) -> ONNX (opset 17,
    dynamic batch, fixed window, front end inside the graph) -> checks:
      1. ONNX Runtime vs the torch forward pass of the same module, max |Δ| <= 1e-4;
      2. where Resemblyzer itself imports (librosa), cosine(ours, Resemblyzer's
         ``VoiceEncoder.embed_utterance``) >= 0.999 on real speech;
    -> manifest (sha256, provenance, licence) -> the models directory.

Preprocessing compared with Resemblyzer's ``preprocess_wav``: we apply its volume
normalisation (raise to -30 dBFS, never lower) inside the graph, per window; we do not
trim long silences with webrtcvad (the runtime gates windows by net speech instead),
and the caller resamples (telephone audio: 8 kHz → 16 kHz with the runtime's polyphase
resampler, not librosa's). The reference check therefore feeds Resemblyzer
``normalize_volume(x, -30, increase_only=True)`` and compares ``embed_utterance``.

torch, resemblyzer and librosa are imported inside functions: the runtime never needs
them. Nothing derived here is committed to the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
import time
import types
import warnings
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Dimension, LegRole
from detectors.manifest import InputSpec, ModelManifest, OutputSpec, sha256_file
from detectors.model_store import Installed, ModelStore
from detectors.speaker.frontend import SAMPLE_RATE

NAME = "speaker-resemblyzer"
VERSION = "1.0.0"
OPSET = 17
TOLERANCE = 1e-4  # max |ONNX Runtime - torch| on the embedding
MIN_COSINE = 0.999  # ours vs Resemblyzer's embed_utterance on real speech
WINDOW_S = 3.0
HOP_S = 1.5
INPUT_NAME = "waveform"
LICENCE = (
    "Apache-2.0 (Resemblyzer voice-encoder weights © Resemble AI / Corentin Jemine, from the "
    "resemblyzer wheel)"
)
DEFAULT_REFERENCE_DIRS = (
    Path("/usr/share/asterisk/sounds/en"),  # asterisk-core-sounds-en-wav (.ci/install.sh)
)

FloatArray = npt.NDArray[np.float32]


class ConversionError(ValueError):
    """The weights do not fit the architecture, or a check fails."""


@dataclass(frozen=True, slots=True)
class DeriveResult:
    installed: Installed
    parameters: int
    max_abs_diff: float
    batch_diff: float
    reference_cosine: float | None  # min over the reference clips; None: not checked
    reference_clips: int
    reference_note: str
    weights_sha256: str


def dependencies_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "resemblyzer"))


def resemblyzer_weights() -> Path:
    """``pretrained.pt`` inside the installed resemblyzer package (not imported)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError("resemblyzer is not installed: pip install 'callshield[convert]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise ConversionError(f"{path}: no pretrained.pt in the resemblyzer package")
    return path


def load_encoder_state(weights: Path) -> dict[str, Any]:
    import torch

    obj = torch.load(str(weights), map_location="cpu", weights_only=True)
    if isinstance(obj, dict) and isinstance(obj.get("model_state"), dict):
        obj = obj["model_state"]
    if not isinstance(obj, dict):
        raise ConversionError(f"{weights}: not a state dict")
    # similarity_weight/bias are the GE2E loss's scale and offset, not the encoder.
    return {k: v for k, v in obj.items() if not k.startswith("similarity_")}


def build_loaded(state: dict[str, Any], samples: int) -> Any:
    from detectors.speaker.torch_model import build_window_embedder

    model = build_window_embedder(samples)
    try:
        model.encoder.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ConversionError(f"weights do not fit the voice encoder: {exc}") from exc
    model.eval()
    return model


def export_onnx(model: Any) -> bytes:
    import torch

    dummy = torch.zeros(2, model.samples, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=["embedding", "score"],
            dynamic_axes={
                INPUT_NAME: {0: "batch"},
                "embedding": {0: "batch"},
                "score": {0: "batch"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
        return path.read_bytes()


def ort_session(model: bytes | Path) -> Any:
    import onnxruntime as ort

    from detectors.onnx_detector import session_options

    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, session_options(1), providers=["CPUExecutionProvider"])


def ort_embed(session: Any, audio: FloatArray) -> FloatArray:
    out = session.run(["embedding"], {INPUT_NAME: np.ascontiguousarray(audio, np.float32)})[0]
    return np.asarray(out, np.float32)


def torch_embed(model: Any, audio: FloatArray) -> FloatArray:
    import torch

    with torch.no_grad():
        emb, _ = model(torch.from_numpy(np.ascontiguousarray(audio, np.float32)))
    result: FloatArray = emb.numpy().astype(np.float32)
    return result


def synthetic_inputs(samples: int, seed: int = 0) -> FloatArray:
    """Noise at speech and near-silence levels, a chirp, clipped loud noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / SAMPLE_RATE
    dur = samples / SAMPLE_RATE
    chirp = 0.3 * np.sin(2 * np.pi * (100 * t + (7000 - 100) / (2 * dur) * t**2))
    rows = [
        1e-4 * rng.standard_normal(samples),
        0.05 * rng.standard_normal(samples),
        chirp,
        np.clip(0.8 * rng.standard_normal(samples), -1, 1),
    ]
    return np.stack(rows).astype(np.float32)


def read_wav(path: Path) -> tuple[FloatArray, int]:
    """Mono 16-bit PCM WAV → float32 in [-1, 1) and its rate."""
    with wave.open(str(path)) as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: not 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
        if w.getnchannels() > 1:
            pcm = pcm.reshape(-1, w.getnchannels())[:, 0]
        return (pcm.astype(np.float32) / 32768.0), w.getframerate()


def to_16k(x: FloatArray, rate: int) -> FloatArray:
    """Resample to 16 kHz with the runtime's polyphase resampler (8 kHz in) or scipy."""
    if rate == SAMPLE_RATE:
        return x
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(rate, SAMPLE_RATE)
    y: FloatArray = resample_poly(x, SAMPLE_RATE // g, rate // g).astype(np.float32)
    return y


def reference_windows(
    paths: list[Path] | None, samples: int, limit: int = 8
) -> tuple[FloatArray | None, str]:
    """Real speech windows of ``samples`` at 16 kHz (the first seconds of each clip,
    clips shorter than a window skipped)."""
    if not paths:
        paths = []
        for d in DEFAULT_REFERENCE_DIRS:
            paths.extend(sorted(d.glob("*.wav"))[:200])
    rows = []
    for p in paths:
        try:
            x, rate = read_wav(p)
        except (OSError, ValueError, EOFError, wave.Error):
            continue
        y = to_16k(x, rate)
        if y.size >= samples:
            rows.append(y[:samples])
        if len(rows) >= limit:
            break
    if not rows:
        return None, "no reference speech found (pass --reference-audio WAV...)"
    return np.stack(rows).astype(np.float32), f"{len(rows)} real speech clips"


def resemblyzer_reference(audio: FloatArray) -> FloatArray:
    """Resemblyzer's own ``embed_utterance`` on volume-normalised audio (needs librosa).

    resemblyzer imports webrtcvad at package import, and webrtcvad 2.0.10 imports
    ``pkg_resources`` (gone from setuptools >= 81); its VAD is only used by
    ``trim_long_silences``, which we do not call, so if the real module does not import
    an empty placeholder stands in for it."""
    try:
        import webrtcvad  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        sys.modules["webrtcvad"] = types.ModuleType("webrtcvad")
    from resemblyzer import (  # type: ignore[import-untyped]
        VoiceEncoder,
        normalize_volume,
    )

    encoder = VoiceEncoder("cpu", verbose=False)
    ref: FloatArray = np.stack(
        [encoder.embed_utterance(normalize_volume(row, -30.0, increase_only=True)) for row in audio]
    ).astype(np.float32)
    return ref


def verify(model: Any, onnx_bytes: bytes, audio: FloatArray) -> tuple[float, float]:
    session = ort_session(onnx_bytes)
    ref = torch_embed(model, audio)
    got = ort_embed(session, audio)
    singles = np.concatenate([ort_embed(session, audio[i : i + 1]) for i in range(len(audio))])
    diff = max(float(np.max(np.abs(got - ref))), float(np.max(np.abs(singles - ref))))
    return diff, float(np.max(np.abs(singles - got)))


def derive_speaker(
    out_dir: Path,
    weights: Path | None = None,
    window_s: float = WINDOW_S,
    hop_s: float = HOP_S,
    reference_audio: list[Path] | None = None,
    require_reference: bool = False,
) -> DeriveResult:
    weights = weights or resemblyzer_weights()
    samples = round(window_s * SAMPLE_RATE)
    hop = round(hop_s * SAMPLE_RATE)
    if samples < 16_000 or hop <= 0:
        raise ConversionError("window must be at least 1 s and hop positive")
    state = load_encoder_state(weights)
    model = build_loaded(state, samples)
    params = sum(int(p.numel()) for p in model.parameters())
    onnx_bytes = export_onnx(model)
    speech, note = reference_windows(reference_audio, samples)
    checks = synthetic_inputs(samples)
    if speech is not None:
        checks = np.concatenate([checks, speech])
    diff, batch_diff = verify(model, onnx_bytes, checks)
    if not diff <= TOLERANCE:
        raise ConversionError(f"ONNX differs from torch by {diff:.3g} > {TOLERANCE}")
    cosine: float | None = None
    if speech is not None and importlib.util.find_spec("librosa") is not None:
        ours = ort_embed(ort_session(onnx_bytes), speech)
        ref = resemblyzer_reference(speech)
        cosine = float(np.min(np.sum(ours * ref, axis=1)))
        if not cosine >= MIN_COSINE:
            raise ConversionError(f"cosine vs Resemblyzer {cosine:.5f} < {MIN_COSINE}")
    elif speech is not None:
        note += "; Resemblyzer reference skipped (librosa not installed)"
    if cosine is None and require_reference:
        raise ConversionError(f"Resemblyzer reference check did not run: {note}")
    sha = sha256_file(weights)
    manifest = make_manifest(onnx_bytes, samples, hop, sha, diff, cosine, note)
    installed = ModelStore(out_dir).add_built(onnx_bytes, manifest)
    n_ref = 0 if speech is None else len(speech)
    return DeriveResult(installed, params, diff, batch_diff, cosine, n_ref, note, sha)


def make_manifest(
    onnx_bytes: bytes,
    samples: int,
    hop: int,
    weights_sha: str,
    diff: float,
    cosine: float | None,
    note: str,
) -> ModelManifest:
    version = f"{VERSION}+w{samples // 160}"
    ref = (
        f"cosine vs Resemblyzer 0.1.4 embed_utterance >= {cosine:.5f} on {note}"
        if cosine is not None
        else f"Resemblyzer reference not checked ({note})"
    )
    return ModelManifest(
        name=NAME,
        version=version,
        dimension=Dimension.VOICE_MISMATCH,
        file=f"{NAME}-{version}.onnx",
        sha256=hashlib.sha256(onnx_bytes).hexdigest(),
        input=InputSpec(name=INPUT_NAME, sample_rate=SAMPLE_RATE, window=samples, hop=hop),
        output=OutputSpec(score="score", embedding="embedding", embedding_dim=256),
        min_net_speech_s=1.5,
        roles=(LegRole.EXTERNAL,),
        thresholds={"default": 0.5},
        provenance=(
            "derived by callshield models derive-speaker from resemblyzer/pretrained.pt of the "
            f"resemblyzer 0.1.4 wheel (sha256 {weights_sha}), model_state loaded strictly into "
            "CallShield's implementation of the voice encoder (detectors/speaker/torch_model.py: "
            "power-mel front end in the graph, LSTM 3x256, linear 256, ReLU, L2 norm, mean of "
            f"1.6 s partials); ONNX opset {OPSET}; max |ONNX Runtime - torch| {diff:.2e}; {ref}"
        ),
        licence=LICENCE,
        description=(
            "Speaker embedding (256-d, L2-normalised, cosine scoring) of a 16 kHz window; "
            "'score' is always 0 (a voiceprint alone is no risk): known_fraudster and "
            "voice_mismatch compare embeddings. Trained by its authors on LibriSpeech, "
            "VoxCeleb 1/2 (wideband); see docs/models/speaker.md for EER on 8 kHz G.711."
        ),
    )


def run_cli(
    out_dir: Path,
    weights: Path | None,
    window_s: float,
    hop_s: float,
    reference_audio: list[Path] | None,
) -> int:
    if not dependencies_available():
        print(
            "error: derive-speaker needs torch and resemblyzer (offline only): "
            "pip install 'callshield[convert]'"
        )
        return 2
    started = time.monotonic()
    try:
        r = derive_speaker(out_dir, weights, window_s, hop_s, reference_audio)
    except ConversionError as exc:
        print(f"error: {exc}")
        return 1
    m = r.installed.manifest
    ref = (
        f"min cosine vs Resemblyzer embed_utterance {r.reference_cosine:.6f} on "
        f"{r.reference_clips} real speech windows (threshold {MIN_COSINE})"
        if r.reference_cosine is not None
        else f"Resemblyzer reference: not checked ({r.reference_note})"
    )
    print(
        f"derived {m.key} ({r.parameters:,} parameters, loaded strictly) -> "
        f"{r.installed.model_path}\n"
        f"  verified: max |ONNX Runtime - torch| = {r.max_abs_diff:.2e} (tolerance "
        f"{TOLERANCE:g}); batch-1 vs batch-N {r.batch_diff:.2e}\n"
        f"  {ref}\n"
        f"  window {m.input.window / SAMPLE_RATE:.2f} s, hop {m.input.hop / SAMPLE_RATE:.2f} s, "
        f"256-d embedding; took {time.monotonic() - started:.1f} s"
    )
    return 0
