"""The speaker model's stage on a bridge that has the model but no S-norm cohort (so
no known_fraudster or voice_mismatch scoring, ``sip_bridge.biometrics``): it still
honours each tenant's ``biometrics_mode`` ``off`` (``gate``: the model never runs on
those calls), drops every embedding, and turns the model's placeholder score into an
``unavailable`` abstention, so nothing downstream reads it as a verified voice."""

from __future__ import annotations

import threading
from dataclasses import replace

from detectors.alert_schema import Abstention
from detectors.bus.biometrics import BiometricsMode
from detectors.contract import WindowResult
from detectors.speaker.biometrics_stage import BiometricsConfig

REASON = "unavailable: no_cohort"


class ModeGate:
    def __init__(self, config: BiometricsConfig, speaker_detector: str) -> None:
        self.config, self.speaker_detector = config, speaker_detector
        self._off: set[str] = set()  # calls whose tenant has biometrics off
        self._lock = threading.Lock()
        self.windows_gated_off = 0

    def open_call(self, call_id: str, tenant: str = "default") -> None:
        if self.config.mode(tenant) is BiometricsMode.OFF:
            with self._lock:
                self._off.add(call_id)

    def end_call(self, call_id: str) -> None:
        with self._lock:
            self._off.discard(call_id)

    def gate(self, detector: str, call_id: str) -> Abstention | None:
        if detector != self.speaker_detector or call_id not in self._off:
            return None
        self.windows_gated_off += 1
        return Abstention.BIOMETRICS_OFF

    def process(self, result: WindowResult) -> tuple[WindowResult, ...]:
        if result.embedding is None:
            return (result,)
        if result.score is None:
            return (replace(result, embedding=None),)
        return (
            replace(
                result,
                embedding=None,
                score=None,
                abstained=Abstention.UNAVAILABLE,
                reasons=(REASON,),
            ),
        )
