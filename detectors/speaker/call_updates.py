"""Mid-call claims as speaker biometrics take them (issue 12): the claimed account's
enrolment is fetched here, off the scoring path, so the call's next windows score
voice_mismatch against it; consent reference, queue and agent are kept with the call.
A :class:`~detectors.bus.call_updates.ClaimTarget` of the node's one claims consumer
(``detectors.bus.call_updates.CallUpdates``).
"""

from __future__ import annotations

from detectors.bus.biometrics import BiometricsMode, CallUpdate
from detectors.speaker.biometrics_stage import SpeakerBiometrics


class BiometricsClaims:
    def __init__(self, biometrics: SpeakerBiometrics) -> None:
        self._bio = biometrics

    def apply(self, u: CallUpdate) -> bool:
        tenant = self._bio.tenant_of(u.call_id)
        if tenant is None:
            return False
        enrolled = None
        if u.claimed_account is not None and self._bio.config.mode(tenant) is BiometricsMode.FULL:
            enrolled = self._bio.state.enrolment(tenant, u.claimed_account)
        return self._bio.claim(
            u.call_id,
            claimed_account=u.claimed_account,
            enrolled=enrolled,
            consent_ref=u.consent_ref,
            queue=u.queue,
            agent_id=u.agent_id,
        )
