"""Composition of the speaker biometrics on the bridge: the speaker model's detector,
its S-norm cohort (``callshield models build-cohort``), the Redis-backed watchlist and
enrolment cache, the runtime stage that turns embeddings into known_fraudster and
voice_mismatch scores, and the target through which mid-call claims reach it
(``claims``: the bridge's one claims consumer, ``Wiring``, applies them).

Without a speaker model nothing is built. Without its cohort the stage is not built
either (scores could not be normalised or thresholded per watchlist size): ``mode_gate``
then still keeps the model off the calls of tenants with ``biometrics_mode`` off, the
model's other windows abstain ``unavailable``, and the log says what to run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from detectors.bus.keys import Keys
from detectors.contract import Detector
from detectors.manifest import ModelManifest
from detectors.speaker.biometrics_stage import SpeakerBiometrics
from detectors.speaker.call_updates import BiometricsClaims
from detectors.speaker.cohort import cohort_path, load_cohort
from detectors.speaker.mode_gate import ModeGate
from detectors.speaker.settings import BiometricsSettings
from detectors.speaker.shared_state import RedisSpeakerState

log = logging.getLogger(__name__)


@dataclass
class Biometrics:
    stage: SpeakerBiometrics
    state: RedisSpeakerState

    @property
    def claims(self) -> BiometricsClaims:
        return BiometricsClaims(self.stage)

    def start(self) -> None:
        self.state.start()

    def close(self) -> None:
        self.state.close()


def speaker_manifest(detectors: Sequence[Detector]) -> ModelManifest | None:
    """The manifest of the (first) detector that outputs speaker embeddings."""
    for d in detectors:
        manifest = getattr(d, "manifest", None)
        if isinstance(manifest, ModelManifest) and manifest.output.embedding:
            return manifest
    return None


def mode_gate(
    detectors: Sequence[Detector], settings: BiometricsSettings | None = None
) -> ModeGate | None:
    """The stage for a speaker model without biometrics (no cohort); None: no model."""
    manifest = speaker_manifest(detectors)
    if manifest is None:
        return None
    return ModeGate((settings or BiometricsSettings()).config(), manifest.name)


def build_biometrics(
    detectors: Sequence[Detector],
    models_dir: Path,
    client: redis.Redis,
    keys: Keys,
    settings: BiometricsSettings | None = None,
) -> Biometrics | None:
    settings = settings or BiometricsSettings()
    manifest = speaker_manifest(detectors)
    if manifest is None:
        return None
    path = cohort_path(models_dir, manifest)
    if not path.is_file():
        log.warning(
            "speaker model %s has no S-norm cohort at %s: known_fraudster and voice_mismatch "
            "are off (run `callshield models build-cohort SPEECH_DIR`)",
            manifest.key,
            path,
        )
        return None
    try:
        cohort, _, _ = load_cohort(path)
    except (OSError, ValueError, KeyError) as exc:
        log.error("cohort %s does not load (%s): speaker biometrics off", path, exc)
        return None
    state = RedisSpeakerState(
        client,
        keys,
        cohort,
        manifest.key,
        target_rate=settings.target_false_match,
        refresh_s=settings.refresh_s,
    )
    stage = SpeakerBiometrics(state, settings.config(), manifest.name)
    log.info(
        "speaker biometrics: mode %s (tenants %s), min net speech %.1f s, target per-call "
        "false-match %.4f, cohort of %d",
        settings.mode.value,
        {t: m.value for t, m in settings.tenant_modes.items()} or "-",
        settings.min_net_speech_s,
        settings.target_false_match,
        cohort.embeddings.shape[0],
    )
    return Biometrics(stage, state)
