"""Composition of the replay dimension for a media process: the fingerprinting
detector's stage and its Redis-backed shared state (``shared_state``). Built only when
the replay fingerprinter is among the detectors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from detectors.bus.keys import Keys
from detectors.contract import Detector
from detectors.replay.detector import NAME
from detectors.replay.shared_state import RedisReplayState
from detectors.replay.stage import ReplayConfig, ReplayStage


@dataclass
class ReplayService:
    stage: ReplayStage
    state: RedisReplayState

    def start(self) -> None:
        self.state.start()

    def close(self) -> None:
        self.state.close()


def build_replay(
    detectors: Sequence[Detector],
    client: redis.Redis,
    keys: Keys,
    node_id: str,
    config: ReplayConfig | None = None,
    tenants: Sequence[str] = ("default",),
) -> ReplayService | None:
    if not any(d.spec.name == NAME for d in detectors):
        return None
    state = RedisReplayState(client, keys, node_id)
    for t in tenants:
        state.follow(t)  # loaded before the first call
    cfg = config or ReplayConfig(node_id=node_id)
    return ReplayService(ReplayStage(state, cfg), state)
