"""Paired training windows (``train-synthetic --paired``, opt-in).

A resynthesis spoof (WORLD, Griffin-Lim, the trained neural vocoder) is a copy of one of
the training speakers' own files. With pairing, every time the window draw picks such a
spoof, the bona fide window beside it is cut from that spoof's source file at the same
offset and goes through the same channel draw, and the two are trained in the same
batch. Speaker, corpus, text, level and channel then tell the pair apart not at all; only
what the vocoder did to the audio does. The other spoof draws (TTS) keep their bona fide
partners as drawn.

The vocoder jobs name a resynthesis ``<family>_<source speaker>/<source stem>.wav``
(``<source stem>.<vocoder>.wav`` for a trained vocoder, ``<source stem>.r<n>.wav`` for a
revised generator), in the part of its source, so the source is found from the clip
alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from detectors.synthetic.dataset import Clip

VERSION = 1  # bump when the pairing changes (the stage cache key holds it)
RESYNTHESIS = frozenset({"world", "griffinlim", "neuralvoc"})


def sources(clips: Sequence[Clip]) -> dict[int, int]:
    """Index of each resynthesis spoof in ``clips`` -> index of its bona fide source in
    ``clips`` (spoofs whose source is not among them are left out)."""
    bona = {(c.speaker, c.path.stem): i for i, c in enumerate(clips) if c.label == 0}
    out: dict[int, int] = {}
    for i, c in enumerate(clips):
        if c.label != 1 or c.family not in RESYNTHESIS or "_" not in c.speaker:
            continue
        speaker = c.speaker.split("_", 1)[1]
        stem = c.path.stem
        src = bona.get((speaker, stem))
        if src is None and "." in stem:  # <source stem>.<vocoder> or .r<revision>
            src = bona.get((speaker, stem.rsplit(".", 1)[0]))
        if src is not None:
            out[i] = src
    return out


def pair(
    picks: npt.NDArray[np.int64],
    seeds: npt.NDArray[np.int64],
    lengths: Sequence[int],
    clips: Sequence[Clip],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """(picks, seeds, spans, pairs made) with every resynthesis spoof at an odd index
    given its source at the even index before it: the same channel seed, and both cut
    within the shorter of the two (``spans``; 0 elsewhere: the clip's own length).
    ``picks`` alternate bona fide (even) and spoof (odd), as ``train.draw_windows``
    draws them."""
    src = sources(clips)
    picks, seeds = picks.copy(), seeds.copy()
    spans = np.zeros(len(picks), np.int64)
    made = 0
    for k in range(1, len(picks), 2):
        s = src.get(int(picks[k]))
        if s is None:
            continue
        picks[k - 1], seeds[k - 1] = s, seeds[k]
        spans[k - 1] = spans[k] = min(lengths[s], lengths[int(picks[k])])
        made += 1
    return picks, seeds, spans, made


def batch_order(n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """An epoch's order of ``n`` windows that keeps each (even, odd) pair side by side,
    so a pair is always in one batch (and every even-sized batch is half bona fide)."""
    if n % 2:
        raise ValueError("paired training needs an even number of windows")
    starts = rng.permutation(n // 2) * 2
    return np.stack([starts, starts + 1], axis=1).ravel()
