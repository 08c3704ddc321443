"""ONNX Runtime model detectors: execution-provider choice (probed once) and the
``Detector`` that runs a manifest's model (DESIGN §3).

The CUDA execution provider of ``onnxruntime-gpu`` is used where its libraries and a
GPU are present, the CPU provider otherwise. The probe runs once per process, with ONNX
Runtime's own logger silenced so a missing CUDA library is not printed on every session,
and logs one line saying which provider and why. TF32 is off on CUDA so scores do not
depend on the provider beyond float32 rounding.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detectors.contract import BatchOutput, DetectorSpec, FloatArray
from detectors.manifest import ModelManifest

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True, slots=True)
class ProviderChoice:
    provider: str  # the provider sessions run on
    reason: str

    @property
    def short(self) -> str:
        return "cuda" if self.provider == CUDA else "cpu"


_choice: ProviderChoice | None = None
_choice_lock = threading.Lock()


def probe_providers(prefer_gpu: bool = True) -> ProviderChoice:
    """Which execution provider to use, decided once per process and logged once."""
    global _choice
    with _choice_lock:
        if _choice is None:
            _choice = _probe(prefer_gpu)
            log.info("onnxruntime: using %s (%s)", _choice.provider, _choice.reason)
        return _choice


def _probe(prefer_gpu: bool) -> ProviderChoice:
    import onnxruntime as ort

    if not prefer_gpu:
        return ProviderChoice(CPU, "GPU disabled by configuration")
    if CUDA not in ort.get_available_providers():
        return ProviderChoice(CPU, f"onnxruntime {ort.__version__} was built without CUDA")
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ProviderChoice(CPU, "no NVIDIA driver on this machine (libcuda.so.1 not found)")
    try:
        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()  # CUDA/cuDNN from the nvidia-* wheels, where installed
        capi = Path(ort.__file__).parent / "capi"
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(capi / "libonnxruntime_providers_cuda.so"))
    except OSError as exc:
        return ProviderChoice(CPU, f"CUDA provider libraries do not load: {exc}")
    return ProviderChoice(CUDA, "NVIDIA driver and CUDA provider libraries load")


def _reset_probe_for_tests() -> None:
    global _choice
    with _choice_lock:
        _choice = None


def session_options(intra_op_threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    # Spinning threads burn the cores the other sessions and the media path need.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def _providers(choice: ProviderChoice) -> list[Any]:
    if choice.provider == CUDA:
        return [(CUDA, {"use_tf32": 0, "cudnn_conv_algo_search": "DEFAULT"}), CPU]
    return [CPU]


class OnnxDetector:
    """A model detector: an ONNX Runtime session for the manifest's model."""

    def __init__(
        self,
        manifest: ModelManifest,
        model: Path | bytes,
        choice: ProviderChoice | None = None,
        intra_op_threads: int = 1,
        codec: str | None = None,
    ) -> None:
        import onnxruntime as ort

        self.manifest = manifest
        self._spec = manifest.detector_spec(codec)
        self.choice = choice or probe_providers()
        source = model if isinstance(model, bytes) else str(model)
        self._session = ort.InferenceSession(
            source, session_options(intra_op_threads), providers=_providers(self.choice)
        )
        used = self._session.get_providers()[0]
        self._provider = "cuda" if used == CUDA else "cpu"
        self._out = manifest.output
        self._names = [self._out.score] + ([self._out.embedding] if self._out.embedding else [])

    @property
    def spec(self) -> DetectorSpec:
        return self._spec

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def intra_op_threads(self) -> int:
        """The threads one batch of this session runs on (as the session reports)."""
        return int(self._session.get_session_options().intra_op_num_threads)

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        outs = self._session.run(self._names, {self.manifest.input.name: audio})
        b = audio.shape[0]
        raw = np.asarray(outs[0], np.float32).reshape(b, -1)
        scores = self._transform(raw)
        embeddings = None
        if self._out.embedding:
            embeddings = np.asarray(outs[1], np.float32).reshape(b, -1)
        return BatchOutput(scores=scores, embeddings=embeddings)

    def _transform(self, raw: FloatArray) -> FloatArray:
        out = self._out
        if out.score_transform == "softmax":
            z = raw - raw.max(axis=1, keepdims=True)
            e = np.exp(z)
            p = e[:, out.score_index] / e.sum(axis=1)
        elif out.score_transform == "sigmoid":
            p = 1.0 / (1.0 + np.exp(-np.clip(raw[:, out.score_index], -80.0, 80.0)))
        else:
            p = raw[:, out.score_index]
        if out.invert:
            p = 1.0 - p
        result: FloatArray = np.clip(p, 0.0, 1.0).astype(np.float32)
        return result

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        sizes = batch_sizes if self._spec.batchable else (1,)
        for b in sizes:
            self.run_batch(np.zeros((b, self._spec.window), np.float32))
