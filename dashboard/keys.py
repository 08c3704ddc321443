"""The dashboard's Redis keys, under the bus's key prefix (``detectors.bus.keys``).

``dash:users``            hash username -> user JSON (argon2 hash, role)
``dash:apikeys``          hash sha256(key) -> API key JSON (id, name, role)
``dash:session:<sid>``    session JSON, TTL = idle timeout (signed cookie holds the sid)
``dash:triage:<alert>``   hash: status, assignee, ack_by, ack_at, label
``dash:comments:<alert>`` list of comment JSON, oldest first
``dash:labels``           hash alert_id -> label JSON (what threshold calibration reads)
``dash:audit``            stream: one entry per analyst/admin action (``MAXLEN ~``)
``dash:rl:<what>:<who>``  rate-limit counters (expire with their window)
``dash:evidence:holds``   hash call_id -> legal hold JSON (who, when, reason masked)
``dash:evidence:reviewers`` hash name -> grant JSON: analysts who may play evidence
``dash:cases``            hash case_id -> case JSON (linked calls, disposition, loss)
``dash:oidc:<state>``     a pending OpenID Connect login (nonce, PKCE verifier, browser
                          binding), TTL 10 minutes, read once
"""

from __future__ import annotations

from dataclasses import dataclass

from detectors.bus.keys import Keys


@dataclass(frozen=True, slots=True)
class DashKeys:
    bus: Keys

    @property
    def _p(self) -> str:
        return f"{self.bus.prefix}dash:"

    @property
    def users(self) -> str:
        return f"{self._p}users"

    @property
    def api_keys(self) -> str:
        return f"{self._p}apikeys"

    def session(self, sid: str) -> str:
        return f"{self._p}session:{sid}"

    def triage(self, alert_id: str) -> str:
        return f"{self._p}triage:{alert_id}"

    def comments(self, alert_id: str) -> str:
        return f"{self._p}comments:{alert_id}"

    @property
    def labels(self) -> str:
        return self.bus.analyst_labels  # dash:labels; calibration reads it too

    @property
    def audit(self) -> str:
        return f"{self._p}audit"

    def rate(self, what: str, who: str) -> str:
        return f"{self._p}rl:{what}:{who}"

    @property
    def evidence_holds(self) -> str:
        return f"{self._p}evidence:holds"

    @property
    def evidence_reviewers(self) -> str:
        return f"{self._p}evidence:reviewers"

    @property
    def cases(self) -> str:
        return f"{self._p}cases"

    def oidc(self, state: str) -> str:
        return f"{self._p}oidc:{state}"
