"""Node liveness and the reaper of lost nodes' calls (DESIGN.md §6).

Every bridge process renews a heartbeat, ``node:<node_id>`` = its boot id with a TTL of
``node_ttl_s`` (default three heartbeats), every ``node_heartbeat_s``, and registers
itself in ``nodes`` (boot id -> node id); with a ``status`` callable it also renews
its summary ``nodestatus:<node_id>`` (``detectors.bus.node_status``, same TTL). The
publisher records each live call's owner (``node`` and ``boot`` in ``call:<id>``, and
the set ``node:<node>:<boot>:calls``).

The reaper runs in every bridge, on the heartbeat thread: bridges are the component
always deployed, and the one whose ACL user already writes call state (the dashboard
and the webhook dispatcher only read it, and a box may run without either). After each
heartbeat a bridge takes ``nodes:reaper`` (``SET NX PX``, one heartbeat long: one reaper
per interval, no release needed) and looks at every registered process: one whose
heartbeat is gone, or now names another boot id (the node restarted), is lost. Each of
its live calls is ended through the normal call-state writer: an ``ended`` call event
with reason ``node_lost`` in the events stream and the call hash (marked ``reaped``),
the call out of ``calls:live``; and every alert of the call gets a final revision with
``call_state: ended``, so webhook subscribers see the end too. One MULTI per call: a
reaper that dies half-way leaves the call for the next one. Calls already ended, or
whose hash is gone, are only dropped from the set; then the process is unregistered.

A live node's calls are never reaped: its heartbeat holds its own boot id. A node
whose heartbeat lapsed (Redis unreachable from it for ``node_ttl_s``, a stalled
process) and that comes back keeps its boot id: its heartbeat is renewed, but the calls
reaped meanwhile stay ended: the hash is final (``detectors.bus.call_state``), its later
events for them stay in the events stream only and the publisher takes such a call out
of ``calls:live`` again; alerts it raises later on such a call are still published.
All bridges down: nothing reaps until one starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import redis

from detectors.alert_schema import Alert, CallEvent, CallState
from detectors.bus.call_state import CallStateWriter
from detectors.bus.keys import Keys
from detectors.bus.node_status import NodeStatus
from detectors.bus.publisher import CALL_RISK, XADD_ALERT, risk_rank
from detectors.bus.settings import BusSettings

log = logging.getLogger(__name__)

NODE_LOST = "node_lost"

# KEYS: heartbeat. ARGV: boot id. Deletes the heartbeat only if it is still this process's.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass
class LivenessStats:
    beats: int = 0
    reaps: int = 0  # passes that held the lock
    calls_reaped: int = 0
    processes_reaped: int = 0
    bad_calls: int = 0  # call hashes that did not parse: ended with a minimal event
    redis_errors: int = 0
    status_errors: int = 0  # status summaries that could not be composed (beat kept)


class Reaper:
    """Ends the live calls of lost bridge processes (one pass: :meth:`reap`)."""

    def __init__(self, client: redis.Redis, settings: BusSettings, boot: str) -> None:
        self._r, self._s = client, settings
        self._k = Keys(settings.key_prefix)
        self._calls = CallStateWriter(client, settings, boot)
        self._alert = client.register_script(XADD_ALERT)
        self._risk = client.register_script(CALL_RISK)
        self.stats = LivenessStats()

    def lost(self) -> list[tuple[str, str]]:
        """(node id, boot id) of every registered process whose heartbeat is not its own."""
        registered = cast(dict[bytes, bytes], self._r.hgetall(self._k.nodes))
        procs = [(b.decode(), n.decode()) for b, n in registered.items()]
        if not procs:
            return []
        pipe = self._r.pipeline(transaction=False)
        for _, node in procs:
            pipe.get(self._k.node(node))
        beats = pipe.execute()
        return [
            (node, boot)
            for (boot, node), beat in zip(procs, beats, strict=True)
            if beat is None or beat.decode() != boot
        ]

    def reap(self, now: datetime | None = None) -> list[str]:
        """End the lost processes' live calls; returns their call ids."""
        ended: list[str] = []
        for node, boot in self.lost():
            owned = self._k.node_calls(node, boot)
            before = len(ended)
            for raw in sorted(cast(set[bytes], self._r.smembers(owned))):
                call_id = raw.decode()
                if self._end(call_id, node, boot, now or datetime.now(UTC)):
                    ended.append(call_id)
                else:
                    self._r.srem(owned, call_id)
            pipe = self._r.pipeline(transaction=True)
            pipe.delete(owned)
            pipe.hdel(self._k.nodes, boot)
            pipe.execute()
            self.stats.processes_reaped += 1
            log.warning(
                "node %s (boot %s) lost: %d live calls ended", node, boot, len(ended) - before
            )
        self.stats.calls_reaped += len(ended)
        return ended

    def _end(self, call_id: str, node: str, boot: str, now: datetime) -> bool:
        fields = cast(dict[bytes, bytes], self._r.hgetall(self._k.call(call_id)))
        if fields.get(b"state", b"ended") == b"ended" or b"reaped" in fields:
            return False
        if fields.get(b"boot", boot.encode()) != boot.encode():
            return False  # written since by another process: not this one's to end
        try:
            last = CallEvent.model_validate_json(fields[b"json"])
            event = CallEvent(
                call_id=call_id,
                event="ended",
                at=now,
                reason=NODE_LOST,
                correlation_id=last.correlation_id,
                external_ids=last.external_ids,
                legs=last.legs,
            )
        except (KeyError, ValueError) as exc:
            self.stats.bad_calls += 1
            log.error("call %s: unreadable call state (%s); ended without it", call_id, exc)
            event = CallEvent(call_id=call_id, event="ended", at=now, reason=NODE_LOST)
        pipe = self._r.pipeline(transaction=True)
        self._calls.queue(pipe, event, event.model_dump_json(), NODE_LOST, (node, boot))
        for alert in self._final_alerts(fields, now):
            payload = alert.model_dump_json()
            keys = [self._k.alerts, self._k.alert_seen(alert.alert_id)]
            self._alert(
                keys=keys, args=[alert.revision, payload, self._s.dedupe_ttl_s], client=pipe
            )
            rank = risk_rank(alert)
            args = [alert.dimension.value, rank, payload, self._s.call_state_ttl_s]
            self._risk(keys=[self._k.call(call_id)], args=args, client=pipe)
        pipe.execute()
        return True

    def _final_alerts(self, fields: dict[bytes, bytes], now: datetime) -> list[Alert]:
        """A last revision, ``call_state: ended``, of each dimension's latest alert."""
        out: list[Alert] = []
        for name, value in fields.items():
            if not name.startswith(b"risk:") or name.endswith(b":rank"):
                continue
            try:
                alert = Alert.model_validate_json(value)
            except ValueError as exc:
                self.stats.bad_calls += 1
                log.error("unreadable alert in call state (%s): not finalised", exc)
                continue
            if alert.call_state != CallState.ENDED:
                update = {"revision": alert.revision + 1, "call_state": CallState.ENDED}
                out.append(alert.model_copy(update=update | {"updated_at": now}))
        return out


class NodeLiveness:
    """This bridge process's heartbeat thread; after each beat it reaps under the lock."""

    def __init__(
        self,
        client: redis.Redis,
        settings: BusSettings,
        boot: str,
        on_reaped: Callable[[list[str]], None] | None = None,
        status: Callable[[], NodeStatus] | None = None,
    ) -> None:
        """``status``: composes this node's summary, written with every heartbeat."""
        self._r, self._s, self.boot = client, settings, boot
        self.status = status
        self._k = Keys(settings.key_prefix)
        self.reaper = Reaper(client, settings, boot)
        self.stats = self.reaper.stats
        self._release = client.register_script(_RELEASE)
        self._on_reaped = on_reaped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        ttl_ms = int(self._s.node_ttl_s * 1000)
        summary = self._summary()
        pipe = self._r.pipeline(transaction=False)
        pipe.set(self._k.node(self._s.node_id), self.boot, px=ttl_ms)
        pipe.hset(self._k.nodes, self.boot, self._s.node_id)
        if summary is not None:
            pipe.set(self._k.node_status(self._s.node_id), summary, px=ttl_ms)
        pipe.execute()
        self.stats.beats += 1

    def _summary(self) -> str | None:
        """The status JSON, or None if composing it failed (the heartbeat goes anyway)."""
        if self.status is None:
            return None
        try:
            return self.status().model_dump_json()
        except Exception:
            self.stats.status_errors += 1
            log.exception("node status not composed; heartbeat sent without it")
            return None

    def tick(self) -> list[str]:
        """One heartbeat, then one reaping pass if this process gets the lock."""
        self.beat()
        lock_ms = max(1, int(self._s.node_heartbeat_s * 1000))
        if not self._r.set(self._k.reaper_lock, self.boot, nx=True, px=lock_ms):
            return []
        self.stats.reaps += 1
        ended = self.reaper.reap()
        if ended and self._on_reaped is not None:
            self._on_reaped(ended)
        return ended

    def start(self) -> None:
        """The first beat now (before the first call), then the thread."""
        self._safe_tick()
        self._thread = threading.Thread(target=self._run, name="node-liveness", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop beating and drop the heartbeat: calls this process still owns (a drain
        that timed out) are ended by the next reaper, at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        try:
            self._release(keys=[self._k.node(self._s.node_id)], args=[self.boot])
        except redis.RedisError as exc:
            log.warning("could not drop the heartbeat (it expires by itself): %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(self._s.node_heartbeat_s):
            self._safe_tick()

    def _safe_tick(self) -> None:
        t0 = time.monotonic()
        try:
            self.tick()
        except redis.RedisError as exc:
            self.stats.redis_errors += 1
            log.warning("heartbeat/reaper: redis unavailable: %s", exc)
        except Exception:  # never let the thread die: the node would look lost
            log.exception("heartbeat/reaper pass failed")
        spent = time.monotonic() - t0
        if spent > self._s.node_heartbeat_s:
            log.warning(
                "heartbeat pass took %.1f s (interval %.1f s)", spent, self._s.node_heartbeat_s
            )
