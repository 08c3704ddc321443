"""The one consumer of mid-call claims on a node (issue 12): a thread reading the
``calls:updates`` stream (``PATCH /api/v1/calls/{id}`` on the dashboard writes it) and
handing each update to every :class:`ClaimTarget` of the node: the alert policy's scope
(the claimed queue) and, where speaker biometrics run, the claimed account's enrolment.

Every bridge reads every update and applies those for calls it has; a target that does
not (yet) have the call keeps the update up to ``pending_s`` for the call to open (the
PATCH may race the call's admission), then drops it. Applying an update twice leaves the
same state. A malformed entry is counted and skipped; a Redis outage is retried from the
last entry read, so nothing written meanwhile is missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import redis

from detectors.bus.biometrics import CallUpdate
from detectors.bus.biometrics_store import read_updates
from detectors.bus.keys import Keys

log = logging.getLogger(__name__)


class ClaimTarget(Protocol):
    """What a claim changes on this node. ``apply`` is idempotent; False: the call is
    not (yet) here (it is retried until ``pending_s``)."""

    def apply(self, update: CallUpdate) -> bool: ...


@dataclass
class UpdateStats:
    read: int = 0
    applied: int = 0  # updates every target applied
    not_here: int = 0  # updates dropped after waiting ``pending_s`` for their call
    malformed: int = 0
    redis_errors: int = 0


class CallUpdates:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        targets: Sequence[ClaimTarget],
        *,
        block_ms: int = 500,
        pending_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._r, self._k, self._targets = client, keys, tuple(targets)
        self._block_ms, self._pending_s, self._clock = block_ms, pending_s, clock
        # call id -> (first seen, update, the targets still to apply it)
        self._pending: dict[str, list[tuple[float, CallUpdate, tuple[ClaimTarget, ...]]]] = {}
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
        """True once every target applied ``u``; the others keep it pending."""
        left = _apply(u, self._targets)
        if left:
            self._pending.setdefault(u.call_id, []).append((self._clock(), u, left))
            return False
        self._done(u)
        return True

    def _done(self, u: CallUpdate) -> None:
        self.stats.applied += 1
        log.info(
            "call %s updated (%s) by %s", u.call_id, ", ".join(sorted(u.fields())), u.command_id
        )

    def _retry_pending(self) -> None:
        now = self._clock()
        for call_id in list(self._pending):
            alive = []
            for t0, u, left in self._pending.pop(call_id):
                left = _apply(u, left)
                if not left:
                    self._done(u)
                elif now - t0 < self._pending_s:
                    alive.append((t0, u, left))
                else:
                    self.stats.not_here += 1
            if alive:
                self._pending[call_id] = alive


def _apply(u: CallUpdate, targets: tuple[ClaimTarget, ...]) -> tuple[ClaimTarget, ...]:
    """The targets that did not have ``u``'s call."""
    return tuple(t for t in targets if not t.apply(u))
