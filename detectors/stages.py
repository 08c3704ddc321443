"""Result stages in a row (``detectors.runtime.ResultStage``): each result goes through
every stage in order, each output of one stage into the next. The replay stage comes
before the speaker biometrics, so a window it turns into an abstention never reaches a
later stage as a score."""

from __future__ import annotations

from collections.abc import Sequence

from detectors.alert_schema import Abstention
from detectors.contract import WindowResult
from detectors.runtime import DrainingStage, GatingStage, ResultStage


class StageChain:
    def __init__(self, stages: Sequence[ResultStage]) -> None:
        self.stages = tuple(stages)

    def open_call(self, call_id: str, tenant: str = "default") -> None:
        for s in self.stages:
            s.open_call(call_id, tenant)

    def end_call(self, call_id: str) -> None:
        for s in self.stages:
            s.end_call(call_id)

    def process(self, result: WindowResult) -> tuple[WindowResult, ...]:
        results: tuple[WindowResult, ...] = (result,)
        for s in self.stages:
            results = tuple(out for r in results for out in s.process(r))
        return results

    def gate(self, detector: str, call_id: str) -> Abstention | None:
        """The first gating stage's verdict on running ``detector`` for the call."""
        for s in self.stages:
            if isinstance(s, GatingStage):
                why = s.gate(detector, call_id)
                if why is not None:
                    return why
        return None

    def drain(self, call_id: str) -> tuple[WindowResult, ...]:
        """What the stages still hold, each passed through the stages after it."""
        out: list[WindowResult] = []
        for i, s in enumerate(self.stages):
            if not isinstance(s, DrainingStage):
                continue
            held: tuple[WindowResult, ...] = s.drain(call_id)
            for later in self.stages[i + 1 :]:
                held = tuple(o for r in held for o in later.process(r))
            out.extend(held)
        return tuple(out)


def chain(stages: Sequence[ResultStage | None]) -> ResultStage | None:
    """None, the one stage, or a chain of the given ones (Nones skipped)."""
    present = [s for s in stages if s is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else StageChain(present)
