"""The replay stage's shared state (DESIGN §1 ``SharedState``): the tenants' benign
audio allowlists, the candidates already proposed, and the recent external-leg
fingerprints of every bridge's calls, all as in-process indexes.

The scoring path only reads indexes (``allowlist``, ``recent``, ``known_candidate``)
and queues what it saw (``publish``, ``propose``): no lock held across I/O, no Redis
round trip per window. A refresher thread, every ``refresh_s``:

- writes the queued fingerprint records to the ``fp:log`` stream (one pipeline,
  ``MAXLEN ~``), the queued candidates to ``fp:cand:<tenant>``, and the calls found
  replaying another call's audio to ``replay:related:<call>``, both ways, expiring
  with ``relation_ttl_s`` (the dashboard's related calls; each pair written once);
- reads the stream from where it stopped (other bridges' records; this node's own are
  indexed locally at once) into a new segment of the recent index, and drops what is
  older than ``retention_s``;
- reloads a followed tenant's allowlist when its version counter moved, and its
  candidates (ids and status) every few refreshes.

A record that does not parse is skipped and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from detectors.bus.allowlist import (
    Candidate,
    LogRecord,
    read_allowlist,
    read_candidates,
    read_version,
)
from detectors.bus.keys import Keys
from detectors.replay.fingerprint import decode
from detectors.replay.index import Clip, FingerprintIndex, MatchConfig

log = logging.getLogger(__name__)
_MAX_RELATED = 100_000


class ReplayState(Protocol):
    def allowlist(self, tenant: str) -> FingerprintIndex | None: ...

    def recent(self) -> FingerprintIndex: ...

    def follow(self, tenant: str) -> None: ...

    def publish(self, clip: Clip) -> None:
        """A stretch of an external leg, for other calls (and bridges) to match."""
        ...

    def known_candidate(self, tenant: str, cand_id: str) -> bool: ...

    def propose(self, candidate: Candidate) -> None: ...

    def relate(self, owner: str, other: str) -> None:
        """``owner``'s audio replays audio ``other`` heard first (for related calls)."""
        ...


@dataclass
class ReplayStateStats:
    published: int = 0
    received: int = 0
    expired: int = 0
    skipped_bad: int = 0
    allowlist_reloads: int = 0
    allowlist_entries: int = 0
    proposed: int = 0
    related: int = 0  # replay relations between two calls recorded
    redis_errors: int = 0


def allowlist_clips(tenant: str, entries: list[Any]) -> tuple[list[Clip], int]:
    clips, bad = [], 0
    for e in entries:
        try:
            fp = decode(e.fingerprint)
        except ValueError:
            bad += 1
            continue
        clips.append(Clip(e.entry_id, fp, e.entry_id, e.created_at.timestamp(), tenant=tenant))
    return clips, bad


class MemoryReplayState:
    """The in-process part (also the whole state for tests and ``callshield eval``)."""

    def __init__(
        self,
        *,
        match: MatchConfig | None = None,
        retention_s: float = 3600.0,
        max_frames: int = 5_000_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._match = match or MatchConfig()
        self._recent = FingerprintIndex(self._match, max_frames)
        self._allow: dict[str, FingerprintIndex] = {}
        self._candidates: dict[str, dict[str, str]] = {}  # tenant -> id -> status
        self._followed: set[str] = set()
        self._pending: list[Clip] = []
        self._proposals: list[Candidate] = []
        self._relations: dict[tuple[str, str], None] = {}  # queued, each pair once
        self._related: set[tuple[str, str]] = set()  # pairs already recorded (bounded)
        self._lock = threading.Lock()
        self.retention_s = retention_s
        self.clock = clock
        self.stats = ReplayStateStats()

    # ---- scoring path -------------------------------------------------------------
    def allowlist(self, tenant: str) -> FingerprintIndex | None:
        return self._allow.get(tenant)

    def recent(self) -> FingerprintIndex:
        return self._recent

    def follow(self, tenant: str) -> None:
        with self._lock:
            self._followed.add(tenant)

    def publish(self, clip: Clip) -> None:
        with self._lock:
            self._pending.append(clip)

    def known_candidate(self, tenant: str, cand_id: str) -> bool:
        return cand_id in self._candidates.get(tenant, {})

    def propose(self, candidate: Candidate) -> None:
        with self._lock:
            self._candidates.setdefault(candidate.tenant, {})[candidate.cand_id] = "proposed"
            self._proposals.append(candidate)
            self.stats.proposed += 1

    # ---- maintenance (the refresher thread, or a test) ----------------------------
    def set_allowlist(self, tenant: str, clips: list[Clip]) -> None:
        index = FingerprintIndex(self._match, 2_000_000)
        index.add(clips)
        self._allow[tenant] = index
        self.stats.allowlist_entries = sum(len(i) for i in self._allow.values())

    def set_candidates(self, tenant: str, statuses: dict[str, str]) -> None:
        with self._lock:
            merged = dict(statuses)
            for p in self._proposals:  # proposed but not written yet
                if p.tenant == tenant:
                    merged.setdefault(p.cand_id, "proposed")
            self._candidates[tenant] = merged

    def relate(self, owner: str, other: str) -> None:
        pair = (owner, other)
        with self._lock:
            if pair in self._related or owner == other:
                return
            if len(self._related) >= _MAX_RELATED:
                self._related.clear()  # at worst a pair is written again
            self._related.add(pair)
            self._relations[pair] = None
            self.stats.related += 1

    def take_relations(self) -> list[tuple[str, str]]:
        with self._lock:
            out, self._relations = list(self._relations), {}
        return out

    def take_pending(self, proposals: bool = True) -> tuple[list[Clip], list[Candidate]]:
        """What the scoring path queued: clips, and (``proposals``) candidates."""
        props: list[Candidate] = []
        with self._lock:
            clips, self._pending = self._pending, []
            if proposals:
                props, self._proposals = self._proposals, []
        return clips, props

    def index_local(self, clips: list[Clip]) -> None:
        self._recent.add(clips)
        self.stats.published += len(clips)

    def expire(self) -> None:
        self.stats.expired += self._recent.expire(self.clock() - self.retention_s)

    def followed(self) -> list[str]:
        with self._lock:
            return sorted(self._followed)

    def settle(self) -> None:
        """Index what was published (no Redis): for tests and offline use."""
        clips, _ = self.take_pending(proposals=False)
        self.index_local(clips)
        self.expire()


@dataclass
class _Cursor:
    stream_id: str = "$"
    allow_versions: dict[str, int] = field(default_factory=dict)
    rounds: int = 0


class RedisReplayState(MemoryReplayState):
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        node_id: str,
        *,
        refresh_s: float = 0.5,
        log_maxlen: int = 200_000,
        relation_ttl_s: int = 24 * 3600,
        candidates_every: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._r, self._k, self.node_id = client, keys, node_id
        self._refresh_s, self._maxlen, self._cand_every = refresh_s, log_maxlen, candidates_every
        self._relation_ttl_s = relation_ttl_s
        self._cursor = _Cursor()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()

    def refresh(self) -> None:
        """One round (the thread's body; tests call it directly)."""
        with self._io:
            try:
                self._flush()
                self._read_log()
                self._reload_allowlists()
            except redis.RedisError as exc:
                self.stats.redis_errors += 1
                log.warning("replay state not refreshed: %s", exc)
            self.expire()
            self._cursor.rounds += 1

    def _flush(self) -> None:
        clips, props = self.take_pending()
        relations = self.take_relations()
        self.index_local(clips)  # this node's calls see each other at once
        if not clips and not props and not relations:
            return
        with self._r.pipeline(transaction=False) as p:
            for owner, other in relations:  # both ways: each call's page finds the other
                for a, b in ((owner, other), (other, owner)):
                    p.sadd(self._k.replay_related(a), b)
                    p.expire(self._k.replay_related(a), self._relation_ttl_s)
            for c in clips:
                rec = LogRecord(
                    clip_id=c.clip_id,
                    node_id=self.node_id,
                    tenant=c.tenant,
                    owner=c.owner,
                    ani_hash=c.ani_hash,
                    seen_at=c.seen_at,
                    start_s=c.start_s,
                    fingerprint=_encode(c),
                )
                p.xadd(
                    self._k.fingerprint_log,
                    {"r": rec.model_dump_json()},
                    maxlen=self._maxlen,
                    approximate=True,
                )
            for cand in props:
                p.hset(
                    self._k.allowlist_candidates(cand.tenant),
                    cand.cand_id,
                    cand.model_dump_json(),
                )
            p.execute()

    def _read_log(self) -> None:
        cur = self._cursor
        if cur.stream_id == "$":  # start where the stream ends now
            last: Any = self._r.xrevrange(self._k.fingerprint_log, count=1)
            cur.stream_id = last[0][0].decode() if last else "0-0"
        clips: list[Clip] = []
        for _ in range(20):
            got: Any = self._r.xread({self._k.fingerprint_log: cur.stream_id}, count=1000)
            if not got:
                break
            entries = got[0][1]
            for entry_id, fields in entries:
                cur.stream_id = entry_id.decode()
                clip = self._parse(fields)
                if clip is not None:
                    clips.append(clip)
            if len(entries) < 1000:
                break
        if clips:
            self._recent.add(clips)
            self.stats.received += len(clips)

    def _parse(self, fields: dict[bytes, bytes]) -> Clip | None:
        try:
            rec = LogRecord.model_validate_json(fields[b"r"])
            if rec.node_id == self.node_id:
                return None
            if rec.seen_at < self.clock() - self.retention_s:
                return None
            return Clip(
                rec.clip_id,
                decode(rec.fingerprint),
                rec.owner,
                rec.seen_at,
                rec.start_s,
                rec.ani_hash,
                rec.tenant,
            )
        except (KeyError, ValueError):
            self.stats.skipped_bad += 1
            return None

    def _reload_allowlists(self) -> None:
        cur = self._cursor
        reload_candidates = cur.rounds % self._cand_every == 0
        for tenant in self.followed():
            version = read_version(self._r, self._k, tenant)
            if tenant not in self._allow or cur.allow_versions.get(tenant) != version:
                version, entries, bad = read_allowlist(self._r, self._k, tenant)
                clips, undecodable = allowlist_clips(tenant, entries)
                self.set_allowlist(tenant, clips)
                cur.allow_versions[tenant] = version
                self.stats.skipped_bad += bad + undecodable
                self.stats.allowlist_reloads += 1
                log.info("allowlist %s: version %d, %d entries", tenant, version, len(clips))
                reload_candidates = True
            if reload_candidates:
                cands, bad = read_candidates(self._r, self._k, tenant)
                self.set_candidates(tenant, {c.cand_id: c.status for c in cands})
                self.stats.skipped_bad += bad

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="replay-state", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._refresh_s):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self.refresh()  # what the last calls published still goes out


def _encode(clip: Clip) -> str:
    from detectors.replay.fingerprint import encode

    return encode(clip.fp)
