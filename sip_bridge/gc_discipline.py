"""GC discipline for the media process (DESIGN §3): after the models are loaded and
pre-warmed, everything alive (models, sessions, rings, preallocated batch tensors,
modules) is collected once and frozen into the permanent generation, so the
collector's full passes no longer walk it while the 20 ms playout clock runs; the
young-generation threshold is raised so the few objects made per tick are swept
less often. ``callshield bench capacity --tick-jitter`` measures the tick lateness
with and without this in the same run.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 10_000  # CPython's default is 700


@dataclass(frozen=True, slots=True)
class Frozen:
    objects: int
    thresholds: tuple[int, int, int]  # the thresholds before, restored by ``thaw``


def freeze_after_warm_up(gen0: int = GEN0_THRESHOLD) -> Frozen:
    """Collect, freeze what is alive, raise the gen0 threshold (0: leave it)."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    if gen0 > 0:
        gc.set_threshold(gen0, before[1], before[2])
    frozen = Frozen(gc.get_freeze_count(), before)
    log.info(
        "gc: %d objects frozen after warm-up, thresholds %s -> %s",
        frozen.objects,
        before,
        gc.get_threshold(),
    )
    return frozen


def thaw(frozen: Frozen) -> None:
    """Undo ``freeze_after_warm_up`` (at close, so a process that builds several
    bridges, e.g. the tests, does not keep their garbage cycles forever)."""
    gc.unfreeze()
    gc.set_threshold(*frozen.thresholds)
