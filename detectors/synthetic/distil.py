"""``train-synthetic --distil K``: one network taught by K restarts of the same recipe.

Why: builds of one recipe that differ only in their initial weights, or in two training
files of ~1,800, land 2-4 EER points apart (docs/models/synthetic_voice.md). An ensemble
of restarts averages that spread away, but costs K networks per window at run time
(``fuse-synthetic`` ships two as one graph). Distillation keeps the run-time cost of one
network: the student trains on the very windows its teachers trained on, towards

    target = (1 - WEIGHT) * label + WEIGHT * sigmoid(mean over teachers of their logit)

(the teachers' fusion is ``fuse-synthetic``'s rule at equal weights), from initial
weights and a batch order of its own (``seed``). The teachers are the recipe's builds at
``--restart 0 .. K-1``: cached in the work directory under the same keys as those builds,
trained first where missing. Nothing here runs at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.synthetic.dataset import _stable

VERSION = 1  # bump when the targets or the student's seed change (its cache key)
WEIGHT = 0.5  # the teachers' share of a target; the rest is the window's own label
BATCH = 64
FloatArray = npt.NDArray[np.float32]


def seed(build_seed: int, teachers: int) -> int:
    """The student's seed (initial weights, batch order): none of its teachers'."""
    if teachers < 2:
        raise ValueError("distillation takes 2 teachers or more")
    return _stable("distil", build_seed, teachers)


def teacher_p(
    models: Sequence[Any],
    windows: npt.NDArray[np.int16],
    progress: Callable[[str], None] | None = None,
) -> FloatArray:
    """The teachers' fused P(spoof) of each int16 window: sigmoid of their mean logit
    (a forward pass of every teacher per window: 24,000 windows x 2 AASIST-lite teachers
    took more than 20 min on one shared core of this box)."""
    import torch

    if not models:
        raise ValueError("no teacher")
    out: list[FloatArray] = []
    with torch.no_grad():
        for i in range(0, len(windows), BATCH):
            x = torch.from_numpy(windows[i : i + BATCH].astype(np.float32) / 32768.0)
            z = torch.stack([m.logit(x).reshape(-1) for m in models]).mean(0)
            out.append(torch.sigmoid(z).numpy().astype(np.float32))
            done = i + len(out[-1])
            if progress and (done // BATCH) % 50 == 0:
                progress(f"  teachers scored {done}/{len(windows)} windows")
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def targets(labels: FloatArray, teacher: FloatArray) -> FloatArray:
    """Each window's training target: its label mixed with the teachers' P(spoof)."""
    if labels.shape != teacher.shape:
        raise ValueError(f"{labels.shape} labels for {teacher.shape} teacher scores")
    mixed: FloatArray = ((1.0 - WEIGHT) * labels + WEIGHT * teacher).astype(np.float32)
    return mixed
