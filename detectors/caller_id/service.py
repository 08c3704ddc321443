"""The caller_id detector: call metadata in (at call start and on every update), one
``WindowResult`` of dimension ``caller_id`` out whenever its verdict changes, into
the same fusion as the audio detectors (policy threshold, hysteresis, one alert per
episode).

``update`` judges the metadata at once on the caller's thread (pure rules, no I/O: a
failed STIR/SHAKEN check reaches fusion before even a very short call ends), with the
velocity last read for the call; the Redis velocity work runs on the detector's own
thread, which re-judges the call with the fresh counts. Neither ``update`` nor
``end_call`` blocks (the bridge's signalling thread calls them). Redis trouble is
logged and counted; the call is then judged without velocity.

A call whose metadata carries no caller-ID information (an RTP fork without
signalling, an anonymous call with no Identity header) is not scored: nothing is
emitted for it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from detectors.alert_schema import Dimension, LegRole
from detectors.caller_id.rules import CallerIdConfig, CallMetadata, Velocity, judge
from detectors.caller_id.velocity import AniVelocity
from detectors.contract import WindowKey, WindowQuality, WindowResult

log = logging.getLogger(__name__)
NAME = "caller_id"
VERSION = "rules-1"
LEG = "signalling"  # the results' leg id: they describe the call, not audio
THRESHOLD = 0.6  # the built-in policy's (detectors.bus.policy)
MAX_QUEUE = 10_000


@dataclass
class CallerIdStats:
    updates: int = 0
    scored: int = 0
    abstained: int = 0
    emitted: int = 0
    redis_errors: int = 0
    dropped: int = 0  # queue full


@dataclass
class _Call:
    hashes: set[str] = field(default_factory=set)  # every ANI hash the call was counted on
    meta: CallMetadata | None = None
    velocity: Velocity = field(default_factory=Velocity)
    last: tuple[float, tuple[str, ...]] | None = None


Item = tuple[str, str, CallMetadata | None]  # (call id, "velocity"/"end"/"mark", meta)


class CallerIdDetector:
    def __init__(
        self,
        sink: Callable[[WindowResult], None],
        velocity: AniVelocity | None,
        config: CallerIdConfig | None = None,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.sink, self.velocity = sink, velocity
        self.config = config or (velocity.config if velocity else CallerIdConfig())
        self._wall = wall
        self._calls: dict[str, _Call] = {}
        self._lock = threading.Lock()  # _calls and the order of emissions
        self._queue: queue.Queue[Item | None] = queue.Queue(MAX_QUEUE)
        self._thread: threading.Thread | None = None
        self._marks: list[threading.Event] = []
        self.stats = CallerIdStats()

    # ---- the caller's side (any thread, never blocks) --------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="caller-id", daemon=True)
            self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    def update(self, call_id: str, meta: CallMetadata) -> WindowResult | None:
        """The call's metadata at start or after an update: judged now with the velocity
        known so far, and queued for a fresh velocity reading. Returns what it emitted."""
        changed, out = self._update(call_id, meta)
        if changed and self.velocity is not None and meta.ani_hash:
            self._put((call_id, "velocity", meta))
        return out

    def end_call(self, call_id: str) -> None:
        self._put((call_id, "end", None))

    def handle(self, call_id: str, meta: CallMetadata) -> WindowResult | None:
        """``update`` and its velocity reading, both on this thread (tests, an offline
        run); the last result it emitted."""
        changed, out = self._update(call_id, meta)
        if changed and self.velocity is not None and meta.ani_hash:
            out = self._observe(call_id, meta) or out
        return out

    def _update(self, call_id: str, meta: CallMetadata) -> tuple[bool, WindowResult | None]:
        self.stats.updates += 1
        with self._lock:
            call = self._calls.setdefault(call_id, _Call())
            if call.meta == meta:
                return False, None
            call.meta = meta
            return True, self._judge(call_id, call, count=True)

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued so far is handled (tests, shutdown)."""
        done = threading.Event()
        self._marks.append(done)
        self._queue.put(("", "mark", None))
        return done.wait(timeout_s)

    def _put(self, item: Item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.stats.dropped += 1
            log.error("caller_id: queue full, call %s's %s dropped", item[0], item[1])

    # ---- the worker -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            call_id, what, meta = item
            try:
                if what == "mark":
                    self._marks.pop(0).set()
                elif what == "end":
                    self._end(call_id)
                elif meta is not None:
                    self._observe(call_id, meta)
            except Exception:  # one bad call must not stop the others
                log.exception("caller_id: call %s not judged", call_id)

    def _observe(self, call_id: str, meta: CallMetadata) -> WindowResult | None:
        """Count the call on its ANI hash, read the velocity, re-judge the call."""
        assert self.velocity is not None
        try:
            v = self.velocity.observe(call_id, meta.ani_hash, meta.verified_attested, self._wall())
        except (redis.RedisError, OSError) as exc:
            self.stats.redis_errors += 1
            log.warning("caller_id: ANI velocity unavailable (%s)", type(exc).__name__)
            return None
        with self._lock:
            call = self._calls.get(call_id)
            if call is None:
                return None
            # a SIPREC update may name another caller: the call is no longer the old one's
            before, call.hashes = call.hashes - {meta.ani_hash}, {meta.ani_hash}
            call.velocity = v
            out = self._judge(call_id, call, count=False)
        for ani_hash in before:
            self._end_one(call_id, ani_hash)
        return out

    def _judge(self, call_id: str, call: _Call, *, count: bool) -> WindowResult | None:
        """Under the lock: the call's verdict now; emitted when it changed."""
        if call.meta is None:
            return None
        verdict = judge(call.meta, call.velocity, self.config)
        if count:
            if verdict is None:
                self.stats.abstained += 1
            else:
                self.stats.scored += 1
        if verdict is None or verdict == call.last:
            return None
        call.last = verdict
        result = WindowResult(
            key=WindowKey(call_id, LEG, LegRole.EXTERNAL, 0.0, 0.0),
            detector=NAME,
            model_version=VERSION,
            dimension=Dimension.CALLER_ID,
            provider="rules",
            score=verdict[0],
            threshold=THRESHOLD,
            abstained=None,
            quality=WindowQuality(),
            reasons=verdict[1],
        )
        self.stats.emitted += 1
        self.sink(result)
        return result

    def _end(self, call_id: str) -> None:
        with self._lock:
            call = self._calls.pop(call_id, None)
        if call is not None:
            for ani_hash in call.hashes:
                self._end_one(call_id, ani_hash)

    def _end_one(self, call_id: str, ani_hash: str) -> None:
        if self.velocity is None:
            return
        try:
            self.velocity.end(call_id, ani_hash)
        except (redis.RedisError, OSError) as exc:
            self.stats.redis_errors += 1
            log.warning("caller_id: live entry not removed (%s)", type(exc).__name__)
