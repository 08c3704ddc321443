"""How many batches of one model run at once (its lane's ``max_inflight``) and how many
threads one batch uses (ONNX Runtime intra-op threads), from the bridge's settings. The
bridge and ``callshield bench capacity`` both build their lanes and sessions from here,
so the benchmark measures the configuration the product runs (issue 5)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from detectors.contract import Detector
from detectors.runtime import DetectorRuntime
from detectors.scheduler import LaneConfig
from sip_bridge.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DetectorConcurrency:
    workers: int  # the detector thread pool every lane shares
    max_inflight: int  # batches of one model at once
    intra_op_threads: int  # ONNX Runtime threads per batch
    max_batch: int = 8  # windows per batch

    @classmethod
    def from_settings(cls, settings: Settings) -> DetectorConcurrency:
        workers = settings.detector_workers
        return cls(
            workers,
            settings.detector_max_inflight or workers,
            settings.detector_intra_op_threads,
            settings.detector_max_batch,
        )

    def override(
        self,
        workers: int | None = None,
        max_inflight: int | None = None,
        intra_op_threads: int | None = None,
    ) -> DetectorConcurrency:
        """These values where given (a benchmark's flags); max_inflight unset follows
        workers when workers is given, as the setting's default does."""
        w = workers or self.workers
        inflight = max_inflight or (w if workers else min(self.max_inflight, w))
        if inflight > w:
            raise ValueError(f"max_inflight {inflight} exceeds workers {w}")
        return DetectorConcurrency(
            w, inflight, intra_op_threads or self.intra_op_threads, self.max_batch
        )

    def lane(self, base: LaneConfig | None = None) -> LaneConfig:
        """``base`` (batch size, wait, deadline; default the bridge's, with its
        ``detector_max_batch``) with this concurrency."""
        return replace(base or LaneConfig(max_batch=self.max_batch), max_inflight=self.max_inflight)

    def as_dict(self) -> dict[str, int]:
        return {
            "workers": self.workers,
            "max_inflight": self.max_inflight,
            "intra_op_threads": self.intra_op_threads,
            "max_batch": self.max_batch,
        }


def log_lanes(runtime: DetectorRuntime, detectors: Sequence[Detector]) -> None:
    """One line per model lane: what it may run at once and on how many threads."""
    threads = {d.spec.name: getattr(d, "intra_op_threads", None) for d in detectors}
    workers = runtime.config.workers
    for name, cfg in runtime.scheduler.lane_configs().items():
        n = threads.get(name)
        log.info(
            "detector lane %s: max_inflight %d of %d workers, max_batch %d, intra-op threads %s",
            name,
            cfg.max_inflight,
            workers,
            cfg.max_batch,
            n if n is not None else "n/a (no ONNX session)",
        )
