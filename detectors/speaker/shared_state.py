"""The speaker detectors' shared state (DESIGN §1 ``SharedState``): each tenant's
watchlist as an in-process matrix, refreshed from Redis in the background, and
enrolments fetched when a call claims an account.

The scoring path only reads ``watchlist(tenant)``: a reference to an immutable
``WatchlistIndex``, no lock, no I/O. A refresher thread polls each followed tenant's
version counter (one GET per tenant per ``refresh_s``) and rebuilds the index when it
moved or when an entry expired. Entries pending a second analyst's approval, of another
speaker model, or that fail to parse, are skipped and counted. ``enrolment`` does one
GET: call it off the scoring path (the call-update thread does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
import redis

from detectors.bus.biometrics import Enrolment, WatchlistEntry
from detectors.bus.biometrics_store import read_enrolment, read_entries, read_version
from detectors.bus.keys import Keys
from detectors.speaker.scoring import Cohort, FloatArray, l2_normalise
from detectors.speaker.watchlist_index import DEFAULT_TARGET_RATE, WatchlistIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EnrolledVoice:
    subject: str
    consent_ref: str
    vector: FloatArray  # unit
    mu: float  # its cohort statistics (S-norm)
    sd: float


class SpeakerState(Protocol):
    cohort: Cohort

    def watchlist(self, tenant: str) -> WatchlistIndex | None:
        """The tenant's current index (None: not loaded yet). In-process only."""
        ...

    def follow(self, tenant: str) -> None:
        """Keep the tenant's watchlist loaded from now on."""
        ...

    def enrolment(self, tenant: str, subject: str) -> EnrolledVoice | None:
        """The subject's enrolment (None: none, expired, or another model). May do I/O."""
        ...


@dataclass
class StateStats:
    reloads: int = 0
    entries: int = 0
    skipped_bad: int = 0
    skipped_model: int = 0
    skipped_expired: int = 0
    skipped_pending: int = 0  # awaiting a second analyst's approval: not used
    redis_errors: int = 0


def vector_of(values: object, dim: int) -> FloatArray:
    return l2_normalise(np.asarray(values, np.float32).reshape(dim))


class RedisSpeakerState:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        cohort: Cohort,
        model: str,
        *,
        target_rate: float = DEFAULT_TARGET_RATE,
        refresh_s: float = 1.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cohort = cohort
        self._r, self._k, self._model = client, keys, model
        self._target, self._refresh_s, self._now = target_rate, refresh_s, now
        self._indexes: dict[str, WatchlistIndex] = {}
        self._followed: set[str] = set()
        self._lock = threading.Lock()  # guards _followed; _indexes values are swapped whole
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = StateStats()

    # ---- scoring path -------------------------------------------------------------
    def watchlist(self, tenant: str) -> WatchlistIndex | None:
        return self._indexes.get(tenant)

    def follow(self, tenant: str) -> None:
        with self._lock:
            self._followed.add(tenant)

    # ---- off the scoring path -----------------------------------------------------
    def enrolment(self, tenant: str, subject: str) -> EnrolledVoice | None:
        try:
            found = read_enrolment(self._r, self._k, tenant, subject)
        except redis.RedisError:
            self.stats.redis_errors += 1
            raise
        except ValueError:
            self.stats.skipped_bad += 1
            return None
        if found is None or found.expired(self._now()) or not self._usable(found):
            return None
        v = vector_of(found.vector(), found.dim)
        mu, sd = self.cohort.stats(v[None, :])
        return EnrolledVoice(found.subject, found.consent_ref, v, float(mu[0]), float(sd[0]))

    def _usable(self, record: Enrolment | WatchlistEntry) -> bool:
        if record.model != self._model or record.dim != self.cohort.dim:
            self.stats.skipped_model += 1
            return False
        return True

    def refresh(self, tenant: str, force: bool = False) -> WatchlistIndex:
        """Rebuild ``tenant``'s index if its version moved or an entry expired."""
        current = self._indexes.get(tenant)
        now = self._now()
        due = current is not None and (
            current.next_expiry is not None and now.timestamp() >= current.next_expiry
        )
        if (
            current is not None
            and not force
            and not due
            and read_version(self._r, self._k, tenant) == current.version
        ):
            return current
        version, entries, bad = read_entries(self._r, self._k, tenant)
        ids, vectors, expiries = [], [], []
        expired = pending = 0
        for e in entries:
            if e.expired(now):
                expired += 1
                continue
            if not e.active:
                pending += 1
                continue
            if not self._usable(e):
                continue
            ids.append(e.entry_id)
            vectors.append(vector_of(e.vector(), e.dim))
            expiries.append(e.expires_at.timestamp())
        self.stats.skipped_bad += bad
        self.stats.skipped_expired += expired
        self.stats.skipped_pending += pending
        if ids:
            index = WatchlistIndex.build(
                tenant,
                version,
                ids,
                np.stack(vectors),
                self.cohort,
                self._target,
                min(expiries),
            )
        else:
            index = WatchlistIndex.empty(tenant, self.cohort.dim, version)
        self._indexes[tenant] = index
        self.stats.reloads += 1
        self.stats.entries = sum(i.size for i in self._indexes.values())
        log.info("watchlist %s: version %d, %d entries loaded", tenant, version, index.size)
        return index

    def refresh_all(self) -> None:
        with self._lock:
            tenants = sorted(self._followed)
        for t in tenants:
            try:
                self.refresh(t)
            except redis.RedisError as exc:
                self.stats.redis_errors += 1
                log.warning("watchlist %s not refreshed: %s", t, exc)

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self.refresh_all()
        self._thread = threading.Thread(target=self._run, name="watchlist-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._refresh_s):
            self.refresh_all()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None


class StaticSpeakerState:
    """An in-memory ``SpeakerState`` (evaluation, tests): indexes and enrolments given."""

    def __init__(self, cohort: Cohort) -> None:
        self.cohort = cohort
        self.indexes: dict[str, WatchlistIndex] = {}
        self.enrolled: dict[tuple[str, str], EnrolledVoice] = {}

    def watchlist(self, tenant: str) -> WatchlistIndex | None:
        return self.indexes.get(tenant)

    def follow(self, tenant: str) -> None:
        return None

    def enrolment(self, tenant: str, subject: str) -> EnrolledVoice | None:
        return self.enrolled.get((tenant, subject))

    def enrol(self, tenant: str, subject: str, vector: FloatArray, consent_ref: str) -> None:
        v = l2_normalise(vector)
        mu, sd = self.cohort.stats(v[None, :])
        self.enrolled[(tenant, subject)] = EnrolledVoice(
            subject, consent_ref, v, float(mu[0]), float(sd[0])
        )


def wait_for_version(state: RedisSpeakerState, tenant: str, version: int, timeout_s: float) -> bool:
    """Test and CLI helper: block until the cached index reaches ``version``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        idx = state.watchlist(tenant)
        if idx is not None and idx.version >= version:
            return True
        time.sleep(0.02)
    return False
