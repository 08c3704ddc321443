"""known_fraudster and voice_mismatch from the speaker model's window embeddings
(DESIGN §2, §5; issues 10 and 11).

The runtime passes every window result through ``process`` before fusion. A result
carrying an embedding (the speaker model's) is consumed here:

- only from an EXTERNAL leg: an embedding of any other leg is dropped and counted
  (the runtime never schedules voice models on internal legs; this is the second lock);
- added to the call's running aggregate, weighted by the net speech the window adds
  (overlapping windows count their new part only);
- once the call has ``min_net_speech_s`` of it, the aggregate (never a single window)
  is searched 1:N against the tenant's watchlist (S-norm, threshold for the
  watchlist's size), **once per call**: one KNOWN_FRAUDSTER window result whose reason
  names the best entry's id (never the embedding). One look keeps the per-call
  false-match rate the one the threshold was chosen for; searching every later window
  again would give an impostor a new chance each time (issue 10 measured that: 1 %
  per call at a 0.1 % target). When the call claims an enrolled account (``full``
  mode), every window from then on carries a VOICE_MISMATCH score against that
  enrolment (1:1: the latest aggregate is the verdict).

The embedding never leaves this object: results going on carry none, and a call's
aggregate is dropped at hang-up. Per tenant ``biometrics_mode``: ``off`` gates the
speaker model itself (``gate``: its windows abstain ``biometrics_off`` before the
scheduler, so no embedding is computed); ``watchlist_only`` searches the watchlist and
never verifies (the model's own placeholder window abstains ``biometrics_off``);
``full`` also scores voice_mismatch once an enrolled account is claimed (until then the
placeholder abstains ``no_enrolment``, or ``too_little_speech`` before enough speech).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import numpy as np

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.bus.biometrics import BiometricsMode
from detectors.contract import WindowKey, WindowResult
from detectors.speaker.scoring import SLOPE, FloatArray, l2_normalise, threshold_for_size, to_unit
from detectors.speaker.shared_state import EnrolledVoice, SpeakerState

WATCHLIST_DETECTOR = "watchlist"
ENROLMENT_DETECTOR = "enrolment"


@dataclass(frozen=True, slots=True)
class BiometricsConfig:
    min_net_speech_s: float = 6.0
    default_mode: BiometricsMode = BiometricsMode.WATCHLIST_ONLY
    modes: dict[str, BiometricsMode] = field(default_factory=dict)  # tenant -> mode
    verify_false_accept: float = 0.01  # 1:1 enrolment threshold: impostor pass rate

    def mode(self, tenant: str) -> BiometricsMode:
        return self.modes.get(tenant, self.default_mode)


@dataclass
class BiometricsStats:
    embeddings_used: int = 0
    embeddings_refused_leg: int = 0  # not an external leg: dropped
    embeddings_discarded_off: int = 0
    windows_gated_off: int = 0  # speaker-model windows never run (mode off)
    watchlist_scores: int = 0
    mismatch_scores: int = 0
    claims_applied: int = 0
    claims_without_enrolment: int = 0


@dataclass
class _CallVoice:
    tenant: str
    mode: BiometricsMode
    total: FloatArray | None = None  # speech-weighted sum of unit window embeddings
    net_speech_s: float = 0.0
    covered_to: dict[str, float] = field(default_factory=dict)  # leg -> end of counted audio
    first_s: float | None = None
    searched: bool = False  # the watchlist was searched (once per call)
    claimed: str | None = None
    enrolled: EnrolledVoice | None = None
    queue: str | None = None
    agent_id: str | None = None
    consent_ref: str | None = None


class SpeakerBiometrics:
    """``speaker_detector``: the name of the speaker model's detector, whose windows
    ``gate`` turns into abstentions for calls of a tenant with biometrics off."""

    def __init__(
        self,
        state: SpeakerState,
        config: BiometricsConfig | None = None,
        speaker_detector: str = "",
    ) -> None:
        self.state = state
        self.config = config or BiometricsConfig()
        self.speaker_detector = speaker_detector
        self._calls: dict[str, _CallVoice] = {}
        self._lock = threading.Lock()
        self.stats = BiometricsStats()
        cal = state.cohort.calibration
        self.verify_threshold = threshold_for_size(1, self.config.verify_false_accept, cal)

    # ---- calls --------------------------------------------------------------------
    def open_call(self, call_id: str, tenant: str = "default") -> None:
        mode = self.config.mode(tenant)
        if mode is not BiometricsMode.OFF:
            self.state.follow(tenant)
        with self._lock:
            self._calls.setdefault(call_id, _CallVoice(tenant, mode))

    def end_call(self, call_id: str) -> None:
        with self._lock:
            self._calls.pop(call_id, None)  # the aggregate dies with the call

    def aggregate(self, call_id: str) -> tuple[FloatArray, float] | None:
        """A copy of the call's unit-length aggregate and its net speech (None: no
        speech folded in yet, or biometrics off). Only for evidence retention, which a
        tenant opts into (``detectors.bus.evidence``): the aggregate stays in memory
        otherwise."""
        with self._lock:
            call = self._calls.get(call_id)
            if call is None or call.total is None or call.mode is BiometricsMode.OFF:
                return None
            return l2_normalise(call.total.copy()), call.net_speech_s

    def has_call(self, call_id: str) -> bool:
        return call_id in self._calls

    def tenant_of(self, call_id: str) -> str | None:
        call = self._calls.get(call_id)
        return call.tenant if call is not None else None

    def claim(
        self,
        call_id: str,
        *,
        claimed_account: str | None = None,
        enrolled: EnrolledVoice | None = None,
        consent_ref: str | None = None,
        queue: str | None = None,
        agent_id: str | None = None,
    ) -> bool:
        """Apply a mid-call update (idempotent). False: the call is not here."""
        with self._lock:
            call = self._calls.get(call_id)
            if call is None:
                return False
            if claimed_account is not None:
                call.claimed, call.enrolled = claimed_account, enrolled
                if enrolled is None:
                    self.stats.claims_without_enrolment += 1
            call.consent_ref = consent_ref or call.consent_ref
            call.queue = queue or call.queue
            call.agent_id = agent_id or call.agent_id
            self.stats.claims_applied += 1
            return True

    # ---- the runtime's stage ------------------------------------------------------
    def gate(self, detector: str, call_id: str) -> Abstention | None:
        """``biometrics_off`` for the speaker model's windows of a call whose tenant has
        biometrics off: the runtime then never runs the model on them."""
        if detector != self.speaker_detector:
            return None
        call = self._calls.get(call_id)
        if call is None or call.mode is not BiometricsMode.OFF:
            return None
        self.stats.windows_gated_off += 1
        return Abstention.BIOMETRICS_OFF

    def process(self, result: WindowResult) -> tuple[WindowResult, ...]:
        emb = result.embedding
        if emb is None:
            return (result,)
        bare = replace(result, embedding=None)
        if result.key.role is not LegRole.EXTERNAL:
            self.stats.embeddings_refused_leg += 1
            return (bare,)
        with self._lock:
            call = self._calls.get(result.key.call_id)
            if call is None or result.score is None:
                return (bare,)
            if call.mode is BiometricsMode.OFF:
                self.stats.embeddings_discarded_off += 1
                return (_abstain(bare, Abstention.BIOMETRICS_OFF),)
            probe, speech, first = self._add(call, result, emb)
            search = probe is not None and not call.searched
            call.searched = call.searched or search
            mode = call.mode
            enrolled = call.enrolled if mode is BiometricsMode.FULL else None
            tenant = call.tenant
        # the model's own window is no voice_mismatch score (its score is a placeholder):
        # it becomes the verification, or an abstention saying why there is none
        if mode is not BiometricsMode.FULL:
            bare = _abstain(bare, Abstention.BIOMETRICS_OFF)
        elif enrolled is None:
            bare = _abstain(bare, Abstention.NO_ENROLMENT)
        elif probe is None:
            bare = _abstain(bare, Abstention.TOO_LITTLE_SPEECH)
        if probe is None:
            return (bare,)
        key = replace(result.key, start_s=first)
        mu, sd = self.state.cohort.stats(probe[None, :])
        stats = (float(mu[0]), float(sd[0]))
        out = [bare]
        if enrolled is not None:
            out[0] = self._mismatch(bare, key, probe, stats, enrolled, speech)
        index = self.state.watchlist(tenant) if search else None
        match = index.search(probe, stats) if index is not None else None
        if index is not None and match is not None:
            self.stats.watchlist_scores += 1
            out.append(
                replace(
                    bare,
                    key=key,
                    detector=WATCHLIST_DETECTOR,
                    model_version=f"{result.model_version}/wl{index.version}",
                    dimension=Dimension.KNOWN_FRAUDSTER,
                    score=to_unit(match.score, match.threshold),
                    abstained=None,
                    threshold=0.5,
                    reasons=(
                        f"watchlist entry {match.entry_id}: s-norm {match.score:.2f} vs "
                        f"{match.threshold:.2f} for {index.size} entries over "
                        f"{speech:.1f} s of speech",
                    ),
                )
            )
        return tuple(out)

    def _add(
        self, call: _CallVoice, r: WindowResult, emb: FloatArray
    ) -> tuple[FloatArray | None, float, float]:
        """Fold one window in; (aggregate or None before enough speech, speech, start)."""
        start, end = r.key.start_s, r.key.end_s
        done = call.covered_to.get(r.key.leg_id, 0.0)
        share = (end - max(start, done)) / (end - start) if end > done and end > start else 0.0
        weight = max(0.0, r.quality.net_speech_s) * share
        call.covered_to[r.key.leg_id] = max(done, end)
        unit = l2_normalise(np.asarray(emb, np.float32).reshape(-1))
        if weight > 0.0:
            call.total = unit * weight if call.total is None else call.total + unit * weight
            call.net_speech_s += weight
            call.first_s = start if call.first_s is None else min(call.first_s, start)
            self.stats.embeddings_used += 1
        first = call.first_s if call.first_s is not None else start
        if call.total is None or call.net_speech_s < self.config.min_net_speech_s:
            return None, call.net_speech_s, first
        return l2_normalise(call.total), call.net_speech_s, first

    def _mismatch(
        self,
        bare: WindowResult,
        key: WindowKey,
        probe: FloatArray,
        stats: tuple[float, float],
        enrolled: EnrolledVoice,
        speech: float,
    ) -> WindowResult:
        raw = float(probe @ enrolled.vector)
        s = 0.5 * ((raw - enrolled.mu) / enrolled.sd + (raw - stats[0]) / stats[1])
        self.stats.mismatch_scores += 1
        # high when the caller scores below the 1:1 acceptance threshold
        score = to_unit(-s, -self.verify_threshold, SLOPE)
        return replace(
            bare,
            key=key,
            detector=ENROLMENT_DETECTOR,
            score=score,
            abstained=None,
            reasons=(
                # not the account reference: reasons go into alerts, webhooks and
                # streams an erasure of the subject cannot reach
                f"claimed account's voiceprint: s-norm {s:.2f} vs acceptance "
                f"{self.verify_threshold:.2f} over {speech:.1f} s of speech",
            ),
        )


def _abstain(result: WindowResult, why: Abstention) -> WindowResult:
    return replace(result, score=None, abstained=why)
