"""Mid-call claims as the alert policy takes them (issue 12): a claimed ``queue``
re-scopes the call's policy (tenant -> queue -> default, ``detectors.bus.policy``) from
its next window on, so the queue's rules and thresholds decide its alerts. ``agent_id``
is no policy scope and changes nothing here. A
:class:`~detectors.bus.call_updates.ClaimTarget` of the node's one claims consumer.
"""

from __future__ import annotations

from detectors.bus.biometrics import CallUpdate
from detectors.runtime import DetectorRuntime


class ScopeClaims:
    def __init__(self, runtime: DetectorRuntime) -> None:
        self._rt = runtime

    def apply(self, u: CallUpdate) -> bool:
        if u.queue is None:
            return self._rt.has_call(u.call_id)
        return self._rt.set_queue(u.call_id, u.queue)
