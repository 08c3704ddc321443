"""Per-window CPU cost of an installed model, measured on this machine.

``callshield models list`` prints it for every model: one ONNX Runtime CPU session with
one intra-op thread (the runtime's default per session), a warm-up run, then the
median of a few batch-1 runs on a window of low-level noise. The figure is this
machine's, not a property of the model file.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from detectors.manifest import ModelManifest
from detectors.onnx_detector import CPU, OnnxDetector, ProviderChoice


def cpu_ms_per_window(manifest: ModelManifest, model: Path | bytes, runs: int = 3) -> float:
    """Median wall time (ms) of one batch-1 window on one CPU thread."""
    detector = OnnxDetector(manifest, model, choice=ProviderChoice(CPU, "cost measurement"))
    audio = (1e-3 * np.random.default_rng(0).standard_normal((1, manifest.input.window))).astype(
        np.float32
    )
    detector.run_batch(audio)
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        detector.run_batch(audio)
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)
