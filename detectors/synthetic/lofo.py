"""Leave-one-spoof-family-out (issue 10): how the synthetic_voice model does on a kind of
spoof it never saw.

``train-synthetic --hold-out-family F`` builds the model with every clip of family F
taken out of training and dev (so neither the weights nor the per-codec thresholds have
seen it), then scores F's clips of every part against the bona fide clips of the dev and
test speakers (speakers training never saw) under each dev channel condition: EER, and
the miss rate at the model's own threshold for that condition. Such a build writes to
``WORK/lofo-<family>/`` (its model to a store there), never over the shipped model.

``train-synthetic --lofo`` does that once per family (a full training each; ``--quick``
for the small test budget) and prints one row per held-out family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detectors.eval.metrics import eer
from detectors.synthetic import channel, dataset, train
from detectors.synthetic.dataset import Clip
from detectors.synthetic.train import FloatArray


def split(clips: Sequence[Clip], family: str) -> tuple[list[Clip], list[Clip]]:
    """(clips to build with: every clip but ``family``'s; the held-out evaluation set:
    ``family``'s clips of every part and the bona fide clips of dev and test)."""
    if family == "bonafide":
        raise ValueError("hold out a spoof family, not bona fide speech")
    kept = [c for c in clips if c.family != family]
    held = [c for c in clips if c.family == family]
    if not held:
        found = sorted({c.family for c in clips if c.label == 1})
        raise ValueError(f"no spoof family {family!r} in this build (families: {found})")
    bona = [c for c in clips if c.label == 0 and c.part in ("dev", "test")]
    return kept, held + bona


def report(
    score: Callable[[FloatArray], FloatArray],
    family: str,
    clips: Sequence[Clip],
    audio: Sequence[FloatArray],
    thresholds: dict[str, float],
    conditions: Sequence[str],
    seed: int,
) -> dict[str, Any]:
    """EER and miss at the model's threshold per condition, held-out family vs unseen
    bona fide speakers."""
    out: dict[str, Any] = {
        "family": family,
        "spoof_clips": sum(c.label for c in clips),
        "bonafide_clips": sum(1 - c.label for c in clips),
        "conditions": {},
    }
    for cond in conditions:

        def transform(x: FloatArray, i: int, cond: str = cond) -> FloatArray:
            return channel.condition(x, cond, seed=seed * 1000 + 500 + i)

        scores = train.clip_scores(score, audio, transform)
        bona = [s for c, s in zip(clips, scores, strict=True) if s is not None and not c.label]
        spoof = [s for c, s in zip(clips, scores, strict=True) if s is not None and c.label]
        e = eer(bona, spoof)
        thr = thresholds.get(cond, thresholds.get("default", 0.5))
        out["conditions"][cond] = {
            "eer": None if e is None else round(e.eer, 4),
            "threshold": round(thr, 6),
            "miss_at_threshold": round(float(np.mean(np.asarray(spoof) < thr)), 4)
            if spoof
            else None,
            "false_alarm_at_threshold": round(float(np.mean(np.asarray(bona) >= thr)), 4)
            if bona
            else None,
            "scored": {"bonafide": len(bona), "spoof": len(spoof)},
        }
    return out


def load(clips: Sequence[Clip]) -> list[FloatArray]:
    return dataset.load_8k(list(clips))


def families(clips: Sequence[Clip]) -> list[str]:
    return sorted({c.family for c in clips if c.label == 1})


def work_dir(work: Path, family: str) -> Path:
    """Where a build holding ``family`` out writes (state dicts, test split, report)."""
    return work / f"lofo-{family}"


def format_table(rows: Sequence[dict[str, Any]], condition: str) -> str:
    lines = [
        f"leave-one-spoof-family-out ({condition}): held-out family vs unseen bona fide speakers",
        "  family       spoof/bona fide clips   EER      miss at thr   FA at thr",
    ]
    for r in rows:
        c = r["conditions"].get(condition, {})
        eer_s = "n/a" if c.get("eer") is None else f"{100 * c['eer']:.1f} %"
        miss = c.get("miss_at_threshold")
        fa = c.get("false_alarm_at_threshold")
        lines.append(
            f"  {r['family']:<12} {r['spoof_clips']:>5}/{r['bonafide_clips']:<5}"
            f"             {eer_s:<8} "
            f"{'n/a' if miss is None else f'{100 * miss:.1f} %':<13} "
            f"{'n/a' if fa is None else f'{100 * fa:.1f} %'}"
        )
    return "\n".join(lines)
