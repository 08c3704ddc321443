"""Speaker biometrics settings (``CALLSHIELD_BIOMETRICS_*``), read by the bridge's
composition root: per-tenant ``biometrics_mode`` (issue 11), how much net speech the
call-level embedding needs, the per-call false-match target the watchlist threshold is
chosen for, and how often the watchlist cache checks Redis."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.bus.biometrics import BiometricsMode
from detectors.speaker.biometrics_stage import BiometricsConfig


class BiometricsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_BIOMETRICS_", extra="ignore")

    mode: BiometricsMode = BiometricsMode.WATCHLIST_ONLY
    # per tenant, e.g. CALLSHIELD_BIOMETRICS_TENANT_MODES='{"eu-bank": "off"}'
    tenant_modes: dict[str, BiometricsMode] = Field(default_factory=dict)
    min_net_speech_s: float = Field(default=6.0, gt=0.0)
    target_false_match: float = Field(default=0.001, gt=0.0, lt=1.0)
    verify_false_accept: float = Field(default=0.01, gt=0.0, lt=1.0)
    refresh_s: float = Field(default=1.0, gt=0.0)

    def config(self) -> BiometricsConfig:
        return BiometricsConfig(
            min_net_speech_s=self.min_net_speech_s,
            default_mode=self.mode,
            modes=dict(self.tenant_modes),
            verify_false_accept=self.verify_false_accept,
        )
