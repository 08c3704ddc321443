"""``train-synthetic --distil K``: one network taught by K restarts of the same recipe.

Why: builds of one recipe that differ only in their initial weights, or in two training
files of ~1,800, land 2-4 EER points apart (docs/models/synthetic_voice.md). An ensemble
of restarts evens some of that out (two restarts fused read level with the better one on
test at two seeds), but costs K networks per window at run time (``fuse-synthetic`` ships
two as one graph). Distillation keeps the run-time cost of one
network: the student trains on the very windows its teachers trained on, towards

    target = (1 - WEIGHT) * label + WEIGHT * sigmoid(mean over teachers of their logit)

(the teachers' fusion is ``fuse-synthetic``'s rule at equal weights), from initial
weights and a batch order of its own (``seed``). The teachers are the recipe's builds at
``--restart 0 .. K-1``: cached in the work directory under the same keys as those builds,
trained first where missing. Nothing here runs at run time.

Measured (2026-12-07, K=2, two speaker splits): the student was worse on dev than the mean
of its two teachers at both seeds (µ-law 10.5 / 7.1 % against 7.9 / 5.7 %), and it failed
the rule set before it was built. It is an option, not the default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from detectors.eval.fusion_study import logit
from detectors.synthetic.dataset import _stable

VERSION = 1  # bump when the targets or the student's seed change (its cache key)
WEIGHT = 0.5  # the teachers' share of a target; the rest is the window's own label
CHUNK = 2_048  # windows scored per step (float32: ~200 MB)
FloatArray = npt.NDArray[np.float32]


def seed(build_seed: int, teachers: int) -> int:
    """The student's seed (initial weights, batch order): none of its teachers'."""
    if teachers < 2:
        raise ValueError("distillation takes 2 teachers or more")
    return _stable("distil", build_seed, teachers)


def teacher_p(
    scorers: Sequence[Callable[[FloatArray], FloatArray]],
    windows: npt.NDArray[np.int16],
    progress: Callable[[str], None] | None = None,
) -> FloatArray:
    """The teachers' fused P(spoof) of each int16 window: the sigmoid of the mean of their
    logits, each P clipped first (``fusion_study.logit``, ``fuse-synthetic``'s rule at
    equal weights). ``scorers`` map float windows to P(spoof): the teachers' exported graphs in
    ONNX Runtime (``build``): 16 ms per AASIST-lite window against 44 ms for its torch
    forward pass (one thread, this box), so 24,000 windows x 2 teachers take ~13 min."""
    if not scorers:
        raise ValueError("no teacher")
    out: list[FloatArray] = []
    for i in range(0, len(windows), CHUNK):
        x = windows[i : i + CHUNK].astype(np.float32) / np.float32(32768.0)
        z = np.mean([logit(np.asarray(score(x)).reshape(-1)) for score in scorers], axis=0)
        out.append((1.0 / (1.0 + np.exp(-z))).astype(np.float32))
        if progress:
            progress(f"  teachers scored {i + len(x)}/{len(windows)} windows")
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def targets(labels: FloatArray, teacher: FloatArray) -> FloatArray:
    """Each window's training target: its label mixed with the teachers' P(spoof)."""
    if labels.shape != teacher.shape:
        raise ValueError(f"{labels.shape} labels for {teacher.shape} teacher scores")
    mixed: FloatArray = ((1.0 - WEIGHT) * labels + WEIGHT * teacher).astype(np.float32)
    return mixed
