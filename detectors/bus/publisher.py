"""The alert publisher the media process composes (DESIGN.md §6): alerts, score updates
and call events to Redis, never blocking the caller, never losing an alert.

``publish_*`` only append to an in-memory queue and wake a flusher thread (no I/O, no
lock held against Redis): the media path never waits. The flusher journals alerts to the
persistent outbox (``detectors.bus.outbox``) before sending them, sends in order, and forgets an
entry only once Redis acknowledged it (and, in strict durability, once it is durable).
While Redis is away everything waits in the outbox; score updates may be dropped to
respect its bound, alerts never.

Alerts are written by a Lua script that checks the (alert_id, revision) dedupe hash and
appends to the stream in one atomic step: a retry after a lost reply returns the entry
that already exists instead of adding a second one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import redis

from detectors.alert_schema import Alert, CallEvent, ScoreUpdate, SystemEvent
from detectors.bus.call_state import REPLY_INDEX, CallStateWriter
from detectors.bus.coverage_objective import state_field
from detectors.bus.durability import StrictWaiter
from detectors.bus.keys import Keys
from detectors.bus.outbox import Entry, Outbox
from detectors.bus.settings import BusSettings

log = logging.getLogger(__name__)

# KEYS: stream, seen-hash. ARGV: revision, json, ttl_s. Returns {created, stream id}.
XADD_ALERT = """
local rev = ARGV[1]
local got = redis.call('HGET', KEYS[2], rev)
if got then return {0, got} end
local id = redis.call('XADD', KEYS[1], '*', 'kind', 'alert', 'json', ARGV[2])
redis.call('HSET', KEYS[2], rev, id)
local latest = tonumber(redis.call('HGET', KEYS[2], 'latest_rev') or '0')
if tonumber(rev) > latest then
  redis.call('HSET', KEYS[2], 'latest_rev', rev, 'latest', ARGV[2])
end
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {1, id}
"""

# The call's live risk, one field per dimension: the latest alert (by updated_at, then
# revision) of that dimension, so an integrator's "risk of this call now?" is one HGETALL
# (DESIGN §6). KEYS: call hash. ARGV: dimension, rank, json, ttl_s (used only when the
# call's hash does not exist yet: an alert published after its call state expired).
CALL_RISK = """
local f = 'risk:' .. ARGV[1]
local had = redis.call('EXISTS', KEYS[1])
local rank = tonumber(redis.call('HGET', KEYS[1], f .. ':rank') or '-1')
if tonumber(ARGV[2]) >= rank then
  redis.call('HSET', KEYS[1], f, ARGV[3], f .. ':rank', ARGV[2])
end
if had == 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
"""


def risk_rank(alert: Alert) -> int:
    """Orders a dimension's alerts: later updates win, then higher revisions."""
    return int(alert.updated_at.timestamp() * 1000) * 1000 + min(alert.revision, 999)


AckCallback = Callable[[str, int, str], None]  # alert_id, revision, stream entry id


@dataclass
class PublisherStats:
    alerts_published: int = 0  # acknowledged by Redis (new entries)
    alerts_deduplicated: int = 0  # a retry found the entry already there
    scores_published: int = 0
    events_published: int = 0
    system_published: int = 0
    events_after_reap: int = 0  # call events of a call the node reaper had ended
    scores_dropped: int = 0  # score updates / call events dropped on overflow
    outbox_overflow: bool = False  # raised while alerts hold the outbox past its bound
    overflow_episodes: int = 0
    alerts_resent: int = 0  # acknowledged, then sent again because Redis went away
    redis_errors: int = 0
    redis_up: bool = False


class AlertPublisher:
    """Owns one Redis connection and one outbox, used only by its flusher thread."""

    def __init__(
        self,
        client: redis.Redis,
        settings: BusSettings,
        outbox: Outbox | None = None,
        on_alert_acked: AckCallback | None = None,
    ) -> None:
        self._client = client
        self._settings = settings
        self._keys = Keys(settings.key_prefix)
        self._outbox = outbox or Outbox(settings.outbox_path, settings.outbox_max_entries)
        self._on_acked = on_alert_acked
        self._script = client.register_script(XADD_ALERT)
        self._risk_script = client.register_script(CALL_RISK)
        # this process's boot id: its heartbeat and the live calls it owns carry it, so
        # a node restarted under the same node id is a new owner (detectors.bus.liveness)
        self.boot = uuid.uuid4().hex
        self._calls = CallStateWriter(client, settings, self.boot)
        self._strict = StrictWaiter(settings.durability == "strict", settings.strict_timeout_ms)
        self._queue: collections.deque[Entry] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._next_try = 0.0  # monotonic: no send attempt before, after a failure
        self._conn_id: object = None
        self._thread: threading.Thread | None = None
        self.stats = PublisherStats()

    # --- the media path: append and return ---------------------------------------------
    def publish_alert(self, alert: Alert) -> None:
        self._queue.append(Entry("alert", alert.model_dump_json(), alert.alert_id, alert.revision))
        self._wake.set()

    def publish_score(self, score: ScoreUpdate) -> None:
        self._enqueue_lossy(Entry("score", score.model_dump_json()))

    def publish_event(self, event: CallEvent) -> None:
        self._enqueue_lossy(Entry("call_event", event.model_dump_json()))

    def publish_system(self, event: SystemEvent) -> None:
        """A system event: rare, so not held to the in-memory queue bound; in the outbox
        (Redis away) it is dropped on overflow with the score updates, unlike alerts."""
        self._queue.append(Entry("system", event.model_dump_json()))
        self._wake.set()

    def _enqueue_lossy(self, entry: Entry) -> None:
        if len(self._queue) >= self._settings.publish_queue_max:
            self.stats.scores_dropped += 1
            return
        self._queue.append(entry)
        self._wake.set()

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="alert-publisher", daemon=True)
        self._thread.start()

    def flush(self, timeout_s: float) -> bool:
        """Wait until the queue and the outbox are empty; False if still pending."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._queue or self._outbox.unsent or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.set()
                self._idle.wait(min(left, 0.05))
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what can be flushed; what cannot stays in the outbox for next start."""
        self.flush(timeout_s)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._cycle(send=False)  # journal anything still queued in memory
        self._outbox.close()

    @property
    def pending(self) -> int:
        """Entries not yet acknowledged by Redis."""
        return len(self._queue) + self._outbox.unsent

    # --- the flusher thread ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._settings.retry_interval_s)
            self._wake.clear()
            with self._idle:
                self._busy = True
            try:
                self._cycle(send=True)
            except Exception:  # never let the flusher die; the outbox keeps everything
                log.exception("alert publisher cycle failed")
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()

    def _cycle(self, send: bool) -> None:
        batch: list[Entry] = []
        while self._queue:
            batch.append(self._queue.popleft())
        backlog = self._outbox.unsent > 0 or not self.stats.redis_up
        journal = [e for e in batch if backlog or e.kind == "alert"]
        direct = [e for e in batch if not (backlog or e.kind == "alert")]
        if journal:
            result = self._outbox.append(journal)
            self.stats.scores_dropped += result.dropped
            self._note_overflow(result.overflow)
        if send and not self.stats.redis_up and time.monotonic() < self._next_try:
            send = False  # Redis failed recently: journal only, retry after the interval
        if not send:
            if direct:
                self._outbox.append(direct)
            return
        if direct and not self._send(direct):
            result = self._outbox.append(direct)
            self.stats.scores_dropped += result.dropped
        while self._outbox.unsent and not self._stop.is_set():
            head = self._outbox.head(self._settings.outbox_batch)
            if not self._send(head):
                break
            if self._strict.mode in ("waitaof", "wait", "fsync_always"):
                self._outbox.remove(head)  # durable already
            else:
                # AOF everysec can lose the last acknowledged writes when Redis dies:
                # keep alerts until they are past the fsync window, resend if it dies
                self._outbox.remove([e for e in head if e.kind != "alert"])
                self._outbox.mark_sent([e for e in head if e.kind == "alert"], time.time())
            self._note_overflow(self._outbox.overflow)
        if self.stats.redis_up:
            self._outbox.confirm(time.time() - self._settings.confirm_window_s)

    def _note_overflow(self, overflow: bool) -> None:
        if overflow and not self.stats.outbox_overflow:
            self.stats.overflow_episodes += 1
            log.error(
                "outbox_overflow: %d alerts waiting hold the outbox past its bound of %d "
                "entries; score updates are being dropped, alerts kept",
                self._outbox.alerts,
                self._outbox.max_entries,
            )
        elif not overflow and self.stats.outbox_overflow:
            log.warning("outbox_overflow cleared")
        self.stats.outbox_overflow = overflow

    def _send(self, entries: list[Entry]) -> bool:
        """Send ``entries`` in order in one pipeline; True once all are acknowledged."""
        keys, s = self._keys, self._settings
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.client_id()  # changes when the connection was re-established
            counts: list[int] = []  # replies each entry queues, for _account
            for e in entries:
                if e.kind == "alert":
                    self._script(
                        keys=[keys.alerts, keys.alert_seen(e.alert_id)],
                        args=[e.revision, e.payload, s.dedupe_ttl_s],
                        client=pipe,
                    )
                    self._call_risk(pipe, e.payload)
                    counts.append(2)
                elif e.kind == "score":
                    pipe.xadd(
                        keys.scores,
                        {"kind": "score", "json": e.payload},
                        maxlen=s.scores_maxlen,
                        approximate=True,
                    )
                    counts.append(1)
                elif e.kind == "system":
                    self._system(pipe, e.payload)
                    counts.append(2)
                else:
                    counts.append(self._call_state(pipe, e.payload))
            results = pipe.execute()
            if any(e.kind == "alert" for e in entries):
                self._strict.wait(self._client)
        except redis.RedisError as exc:
            self.stats.redis_errors += 1
            if self.stats.redis_up:
                log.warning("redis unavailable, alerts wait in the outbox: %s", exc)
            self.stats.redis_up = False
            self._next_try = time.monotonic() + self._settings.retry_interval_s
            self._strict.reset()
            self.stats.alerts_resent += self._outbox.unsend_all()
            return False
        if not self.stats.redis_up:
            log.info("redis available; sending %d waiting entries", len(self._outbox))
        self.stats.redis_up = True
        conn_id = results[0]
        if conn_id != self._conn_id:
            # a new connection: Redis may have restarted and lost acknowledged writes
            if self._conn_id is not None:
                self.stats.alerts_resent += self._outbox.unsend_all()
            self._conn_id = conn_id
        self._account(entries, results[1:], counts)
        return True

    def _unlist_reaped(self, call_ids: list[str]) -> None:
        """A late event of a call the reaper ended put it back in the live sets: out
        again (its hash stayed ended). Best effort: the reaper's state is the truth."""
        self.stats.events_after_reap += len(call_ids)
        log.warning("call events after the node reaper ended the call: %s", call_ids)
        try:
            pipe = self._client.pipeline(transaction=False)
            for call_id in call_ids:
                self._calls.unlist(pipe, call_id)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not unlist reaped calls %s: %s", call_ids, exc)

    def _call_risk(self, pipe: redis.client.Pipeline, payload: str) -> None:
        alert = Alert.model_validate_json(payload)
        self._risk_script(
            keys=[self._keys.call(alert.call_id)],
            args=[
                alert.dimension.value,
                risk_rank(alert),
                payload,
                self._settings.call_state_ttl_s,
            ],
            client=pipe,
        )

    def _call_state(self, pipe: redis.client.Pipeline, payload: str) -> int:
        """Queue the call event's commands; returns how many replies they produce."""
        return self._calls.queue(pipe, CallEvent.model_validate_json(payload), payload)

    def _system(self, pipe: redis.client.Pipeline, payload: str) -> None:
        keys = self._keys
        event = SystemEvent.model_validate_json(payload)
        pipe.xadd(
            keys.system,
            {"kind": "system", "json": payload},
            maxlen=self._settings.system_maxlen,
            approximate=True,
        )
        pipe.hset(keys.system_state, state_field(event), payload)

    def _account(self, entries: list[Entry], results: list[object], counts: list[int]) -> None:
        # results has one reply per queued command; counts says how many per entry
        it = iter(results)
        reaped: list[str] = []
        for e, n in zip(entries, counts, strict=True):
            replies = [next(it) for _ in range(n)]
            if e.kind == "alert":
                created, stream_id = cast(list[object], replies[0])
                sid = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
                if created:
                    self.stats.alerts_published += 1
                else:
                    self.stats.alerts_deduplicated += 1
                if self._on_acked is not None:
                    self._on_acked(e.alert_id, e.revision, sid)
            elif e.kind == "score":
                self.stats.scores_published += 1
            elif e.kind == "system":
                self.stats.system_published += 1
            else:
                self.stats.events_published += 1
                if replies[REPLY_INDEX] == 0:  # the reaper ended this call
                    event = CallEvent.model_validate_json(e.payload)
                    if event.event != "ended":
                        reaped.append(event.call_id)
        if reaped:
            self._unlist_reaped(reaped)
