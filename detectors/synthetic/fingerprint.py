"""What a ``train-synthetic`` build trained on, as digests, so that two builds of one
recipe and seed (on two machines, or a week apart) can tell where they parted.

A build is deterministic on one box (docs/models/synthetic_voice.md, "WORLD spoofs that
do not depend on the heap"), but a rebuild of restart 1 at seed 0 on a fresh machine read
dev µ-law EER 4.9 % against 6.3 % (2026-12-08), and nothing recorded could say whether
the spoofs, the drawn windows or the training arithmetic differed. The report now keeps:

- ``clips``: per part and family, a digest of every clip's audio file (bytes, in name
  order): the generators' output (a tool or voice of another version shows up in its
  family's digest) and the corpus itself;
- ``train_windows``: the drawn training windows and their labels, after the telephone
  channel (resampling, codecs, noise, loss);
- ``environment``: the packages and CPU that do the arithmetic (torch, numpy,
  onnxruntime versions, the CPU model, torch's thread count).

Same clips and windows but other weights: the arithmetic (CPU kernels, thread count,
library versions). Nothing here runs at run time.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections import defaultdict
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.synthetic.dataset import Clip

SHORT = 16  # hex digits kept: enough to tell two builds apart, short enough to read


def clips(all_clips: Sequence[Clip]) -> dict[str, dict[str, str]]:
    """{part: {family: digest of its clips' files}}, each family's files in name order
    (the name carries the system, so two systems' files never mix)."""
    groups: dict[tuple[str, str], list[Clip]] = defaultdict(list)
    for c in all_clips:
        groups[(c.part, c.family)].append(c)
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for (part, family), members in sorted(groups.items()):
        h = hashlib.sha256()
        for c in sorted(members, key=lambda c: (c.system, c.speaker, c.path.name)):
            h.update(f"{c.system}/{c.speaker}/{c.path.name}\0".encode())
            h.update(Path(c.path).read_bytes())
        out[part][family] = h.hexdigest()[:SHORT]
    return dict(out)


def windows(drawn: npt.NDArray[Any], labels: npt.NDArray[Any]) -> str:
    """One digest of the training windows and their labels, as drawn (dtype and shape
    included)."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(drawn), np.ascontiguousarray(labels)):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:SHORT]


def environment() -> dict[str, Any]:
    """The versions and CPU behind the arithmetic of training and export."""

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {
        "torch": version("torch"),
        "numpy": version("numpy"),
        "onnxruntime": version("onnxruntime") or version("onnxruntime-gpu"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
