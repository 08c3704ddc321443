"""Hot reload of the alert policy on a bridge: a thread polls ``policy:version`` (one
GET every ``interval_s``), and when it moves reads the policy and hands it to ``apply``
(the runtime's ``set_policy``: a reference swap, copy-on-write; the scoring path takes
no lock for it). A change therefore reaches live calls within ``interval_s`` plus one
read. A stored policy that does not parse or whose version does not match its content
is logged and counted, and the policy in force stays; so does a Redis outage. Deleting
the stored policy returns the bridge to the built-in one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import redis

from detectors.bus.keys import Keys
from detectors.bus.policy import Policy
from detectors.bus.policy_store import read_policy, read_version

log = logging.getLogger(__name__)


@dataclass
class WatchStats:
    reloads: int = 0
    rejected: int = 0
    redis_errors: int = 0
    version: str = ""


class PolicyWatcher:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        apply: Callable[[Policy], None],
        interval_s: float = 0.25,
    ) -> None:
        self._r, self._k, self._apply, self._interval = client, keys, apply, interval_s
        self._seen: str | None = None  # the version key's value last acted on
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._redis_down = False
        self.stats = WatchStats(version=Policy().version)

    def start(self) -> None:
        """Load the stored policy now (before the bridge reports ready), then watch."""
        self.check()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="policy-watch", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.check()

    def check(self) -> bool:
        """One poll; True when a new policy was applied."""
        try:
            version = read_version(self._r, self._k)
            self._redis_down = False
            if version == self._seen:
                return False  # (None at start: nothing stored, the built-in policy runs)
            policy = read_policy(self._r, self._k) or Policy()
        except redis.RedisError as exc:
            self.stats.redis_errors += 1
            if not self._redis_down:
                log.warning("policy watch: redis unavailable (%s); policy stays", exc)
            self._redis_down = True
            return False
        except ValueError as exc:
            self._seen = version
            self.stats.rejected += 1
            log.error("stored policy %s refused (%s); %s stays", version, exc, self.stats.version)
            return False
        self._seen = version
        if policy.version == self.stats.version:
            return False
        self._apply(policy)
        self.stats.reloads += 1
        log.info("alert policy %s in force (was %s)", policy.version, self.stats.version)
        self.stats.version = policy.version
        return True
