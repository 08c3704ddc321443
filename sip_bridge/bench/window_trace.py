"""Per-call window timelines for ``callshield bench alert-latency --trace``: which
synthetic_voice windows each leg was cut (on the hop grid or at an utterance end), what
each scored or why it abstained, where the bank noted utterance ends, and which window
opened the alert, all in leg seconds relative to the suspicious utterance's end.

Leg time (the bank's, ``WindowKey.start_s``/``end_s``) starts when the leg is added;
the leg's first received frame marks where the call's audio starts on it, so an
utterance that ends ``offset_s`` into the audio ends ``first_real_s + offset_s`` into
the leg (the audio is paced exactly, the jitter buffer plays it out at a fixed delay).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from detectors.alert_schema import Dimension
from detectors.contract import WindowResult
from detectors.runtime import DetectorRuntime
from detectors.windowing import REAL, UNITS_PER_FRAME, WindowJob, WindowPlan

_SEC_PER_TICK = 0.02


@dataclass
class _Leg:
    first_real_s: float | None = None
    noted_ends_s: list[float] = field(default_factory=list)
    cuts: dict[float, tuple[bool, float]] = field(default_factory=dict)  # end -> urgent, wall
    results: dict[float, WindowResult] = field(default_factory=dict)


class WindowTrace:
    """Wraps the ``dimension`` plan's ``collect`` and notes every result (``note``)."""

    def __init__(self, runtime: DetectorRuntime, dimension: Dimension) -> None:
        self.bank = runtime.bank
        plan = next((p for p in runtime.plans if p.spec.dimension is dimension), None)
        if plan is None:
            raise ValueError(f"no {dimension.value} detector to trace")
        self.plan: WindowPlan = plan
        self.dimension = dimension
        self.legs: dict[str, _Leg] = {}
        self._lock = threading.Lock()
        inner: Callable[[float], list[WindowJob]] = plan.collect
        plan.collect = self._collect(inner)  # type: ignore[method-assign,assignment]

    def _collect(
        self, inner: Callable[[float], list[WindowJob]]
    ) -> Callable[[float], list[WindowJob]]:
        def collect(now: float) -> list[WindowJob]:
            jobs = inner(now)
            wall, bank = time.time(), self.bank
            col = ((bank.tick - 1) % bank.ring_frames) * UNITS_PER_FRAME
            with self._lock:
                for leg in bank._legs.values():
                    t = self.legs.setdefault(leg.info.call_id, _Leg())
                    if t.first_real_s is None and bank.units[leg.row, col] & 0x0F == REAL:
                        t.first_real_s = round((bank.tick - 1 - leg.first_tick) * _SEC_PER_TICK, 3)
                    end = int(bank.utterance_end[leg.row] - leg.first_tick)
                    end_s = round(end * _SEC_PER_TICK, 3)
                    if end > 0 and (not t.noted_ends_s or t.noted_ends_s[-1] != end_s):
                        t.noted_ends_s.append(end_s)
                for job in jobs:
                    t = self.legs.setdefault(job.key.call_id, _Leg())
                    t.cuts[round(job.key.end_s, 3)] = (job.urgent, wall)
            return jobs

        return collect

    def note(self, result: WindowResult) -> None:
        if result.dimension is not self.dimension:
            return
        with self._lock:
            t = self.legs.setdefault(result.key.call_id, _Leg())
            t.results[round(result.key.end_s, 3)] = result

    def timeline(
        self,
        call_id: str,
        offset_s: float,
        offset_wall: float | None,
        alert: tuple[float, float] | None,
    ) -> dict[str, Any]:
        """One call's windows, relative to its utterance end (leg seconds; ``cut_ms``:
        wall ms from the utterance's last packet to the window's cut)."""
        t = self.legs.get(call_id, _Leg())
        zero = None if t.first_real_s is None else t.first_real_s + offset_s

        def rel(x: float) -> float | None:
            return None if zero is None else round(x - zero, 3)

        windows = []
        for end in sorted(set(t.cuts) | set(t.results)):
            urgent, wall = t.cuts.get(end, (False, None))
            r = t.results.get(end)
            windows.append(
                {
                    "start": rel(r.key.start_s) if r else None,
                    "end": rel(end),
                    "cut": "utterance_end" if urgent else "grid",
                    "cut_ms": None
                    if wall is None or offset_wall is None
                    else round((wall - offset_wall) * 1000.0),
                    "score": None if r is None or r.score is None else round(r.score, 3),
                    "abstained": None if r is None or r.abstained is None else r.abstained.value,
                    "speech_s": None if r is None else round(r.quality.net_speech_s, 2),
                    "threshold": None if r is None else r.threshold,
                }
            )
        return {
            "call_id": call_id,
            "utterance_end_leg_s": None if zero is None else round(zero, 3),
            "noted_ends": [rel(e) for e in t.noted_ends_s],
            "alert_ms": None
            if alert is None or offset_wall is None
            else round((alert[0] - offset_wall) * 1000.0),
            "alert_window_end": None if alert is None else rel(alert[1]),
            "windows": windows,
        }
