"""Mid-call claims for the calls this node analyses (issue 12): a thread reading the
``calls:updates`` stream (``PATCH /api/v1/calls/{id}`` on the dashboard writes it) and
applying each update to the live call: the claimed account's enrolment is fetched here,
off the scoring path, so the call's next windows score voice_mismatch against it.

Every bridge reads every update and applies those for calls it has; one for a call not
(yet) here waits up to ``pending_s`` for the call to open (the PATCH may race the
call's admission), then is dropped. Applying an update twice leaves the same state. A
malformed entry is counted and skipped; a Redis outage is retried from the last entry
read, so nothing written meanwhile is missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from detectors.bus.biometrics import BiometricsMode, CallUpdate
from detectors.bus.biometrics_store import read_updates
from detectors.bus.keys import Keys
from detectors.speaker.biometrics_stage import SpeakerBiometrics

log = logging.getLogger(__name__)


@dataclass
class UpdateStats:
    read: int = 0
    applied: int = 0
    not_here: int = 0
    malformed: int = 0
    redis_errors: int = 0


class CallUpdates:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        biometrics: SpeakerBiometrics,
        *,
        block_ms: int = 500,
        pending_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._r, self._k, self._bio = client, keys, biometrics
        self._block_ms, self._pending_s, self._clock = block_ms, pending_s, clock
        self._pending: dict[str, list[tuple[float, CallUpdate]]] = {}
        self._last = "$"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = UpdateStats()

    def start(self) -> None:
        if self._thread is not None:
            return
        try:
            self._last = self._tail()
        except redis.RedisError as exc:
            self.stats.redis_errors += 1
            log.warning("call updates: stream position not read (%s); starting at 0", exc)
            self._last = "0-0"
        self._thread = threading.Thread(target=self._run, name="call-updates", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _tail(self) -> str:
        last = self._r.xrevrange(self._k.call_updates, count=1)
        if not last:
            return "0-0"
        entry_id = last[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except redis.RedisError as exc:
                self.stats.redis_errors += 1
                log.warning("call updates: %s (retrying)", exc)
                self._stop.wait(1.0)

    def poll(self) -> int:
        """Read and apply what arrived (blocking up to ``block_ms``); how many read."""
        self._last, updates = read_updates(self._r, self._k, self._last, self._block_ms, self._bad)
        self.stats.read += len(updates)
        for u in updates:
            self.apply(u)
        self._retry_pending()
        return len(updates)

    def _bad(self, entry_id: str, exc: Exception) -> None:
        self.stats.malformed += 1
        log.warning("call update %s malformed: skipped (%s)", entry_id, type(exc).__name__)

    def apply(self, u: CallUpdate) -> bool:
        tenant = self._bio.tenant_of(u.call_id)
        if tenant is None:
            self._pending.setdefault(u.call_id, []).append((self._clock(), u))
            return False
        enrolled = None
        if u.claimed_account is not None and self._bio.config.mode(tenant) is BiometricsMode.FULL:
            enrolled = self._bio.state.enrolment(tenant, u.claimed_account)
        done = self._bio.claim(
            u.call_id,
            claimed_account=u.claimed_account,
            enrolled=enrolled,
            consent_ref=u.consent_ref,
            queue=u.queue,
            agent_id=u.agent_id,
        )
        if done:
            self.stats.applied += 1
            log.info(
                "call %s updated (%s) by %s", u.call_id, ", ".join(sorted(u.fields())), u.command_id
            )
        return done

    def _retry_pending(self) -> None:
        now = self._clock()
        for call_id in list(self._pending):
            waiting = self._pending.pop(call_id)
            if self._bio.has_call(call_id):
                for _, u in waiting:
                    self.apply(u)
                continue
            alive = [(t, u) for t, u in waiting if now - t < self._pending_s]
            self.stats.not_here += len(waiting) - len(alive)
            if alive:
                self._pending[call_id] = alive
