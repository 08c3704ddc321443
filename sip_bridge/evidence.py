"""Evidence retention on the bridge (issue 11; ``detectors.bus.evidence``): for a
tenant that opted in, the external leg's audio around each alert and/or the call's
aggregated speaker embedding, sealed and written to Redis with an expiry.

- The playout thread (``push``, under the analysis lock) copies each recorded leg's
  20 ms frame into that leg's ring (``ring_s`` of 8 kHz int16, allocated only for
  external legs of calls whose tenant keeps clips; the internal leg is never
  registered here). Paused frames are written as silence (DESIGN §2: secure pause).
  Leg time counts from the tick the leg was registered, the same clock as the frame
  bank's, so alerts' reason times index this ring directly.
- An alert (``on_alert``, detector threads), first seen for its id, asks for a clip
  from ``pre_s`` before its window to ``post_s`` after it; the clip is cut when the
  leg's clock passes that end, or at hang-up with what there is, and whatever the ring
  no longer holds is left out (``start_s`` says where the clip really starts).
- At hang-up (``call_ending`` before the runtime drops the call, ``call_ended`` after
  its last alerts) the speaker aggregate is stored once when the call raised an alert.
- Sealing (AES-GCM) and the Redis write happen on this module's writer thread; its
  queue is bounded (``queue_max``): beyond it records are dropped and counted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Alert
from detectors.bus.evidence import (
    CLIP_RATE,
    EvidenceKind,
    EvidenceMeta,
    EvidenceSettings,
    EvidenceVault,
)
from native.ingest import PulledFrames

log = logging.getLogger(__name__)
FRAME = CLIP_RATE // 50  # 20 ms at 8 kHz


class EmbeddingSource(Protocol):
    """``detectors.speaker.biometrics_stage.SpeakerBiometrics``."""

    def aggregate(self, call_id: str) -> tuple[npt.NDArray[np.float32], float] | None: ...


class RecordWriter(Protocol):
    """``detectors.bus.evidence_store.EvidenceWriter``."""

    def write(self, meta: EvidenceMeta, blob: bytes) -> None: ...


@dataclass
class EvidenceStats:
    clips: int = 0
    embeddings: int = 0
    dropped: int = 0  # the writer's queue was full
    failed: int = 0  # Redis refused or was away
    missed: int = 0  # an alert whose call or leg is not recorded here


@dataclass
class _Leg:
    call_id: str
    leg_id: str
    started_at: datetime
    ring: npt.NDArray[np.int16]
    written: int = 0  # samples since registration (the leg clock)
    paused: int = 0
    active: bool = True

    def cut(self, start: int, end: int) -> tuple[int, npt.NDArray[np.int16]]:
        """Samples [start, end) as far as the ring still holds them: (first, audio)."""
        start = max(start, self.written - self.ring.size, 0)
        end = min(end, self.written)
        if end <= start:
            return start, np.zeros(0, np.int16)
        idx = np.arange(start, end) % self.ring.size
        return start, self.ring[idx].copy()


@dataclass
class _Pending:
    alert: Alert
    leg_id: str
    start: int  # samples on the leg clock
    end: int
    window: tuple[float, float]


@dataclass
class _Call:
    tenant: str
    started_at: datetime | None = None
    legs: dict[str, _Leg] = field(default_factory=dict)
    alerted: set[str] = field(default_factory=set)
    pending: list[_Pending] = field(default_factory=list)
    embedding: tuple[npt.NDArray[np.float32], float] | None = None


class EvidenceRecorder:
    def __init__(
        self,
        settings: EvidenceSettings,
        vault: EvidenceVault,
        writer: RecordWriter,
        node_id: str,
        embeddings: EmbeddingSource | None = None,
        model: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.stats = EvidenceStats()
        self._vault, self._writer, self._node = vault, writer, node_id
        self._embeddings, self._model, self._clock = embeddings, model, clock
        self._ring = int(settings.ring_s * CLIP_RATE)
        self._calls: dict[str, _Call] = {}
        self._by_sid: dict[int, _Leg] = {}
        self._lock = threading.Lock()  # a leaf: calls, legs, pending clips
        self._queue: queue.Queue[tuple[EvidenceMeta, bytes] | None] = queue.Queue(
            settings.queue_max
        )
        self._thread = threading.Thread(target=self._run, name="evidence-writer", daemon=True)
        from native import lib

        self._paused_flag = int(lib.CS_FRAME_PAUSED)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    # ---- calls and legs (signalling and playout threads) ------------------------------

    def call_started(self, call_id: str, at: datetime, tenant: str = "default") -> None:
        with self._lock:
            call = self._calls.setdefault(call_id, _Call(tenant))
            call.started_at = call.started_at or at

    def add_leg(self, call_id: str, leg_id: str, stream_id: int) -> None:
        """An EXTERNAL leg registered for analysis (the caller of this makes sure)."""
        with self._lock:
            call = self._calls.setdefault(call_id, _Call("default"))
            if not self.settings.mode_for(call.tenant).clip:
                return
            leg = call.legs.get(leg_id)
            if leg is None:
                ring = np.zeros(self._ring, np.int16)
                leg = call.legs[leg_id] = _Leg(call_id, leg_id, self._now(), ring)
            leg.active = True
            self._by_sid[stream_id] = leg

    def remove_leg(self, stream_id: int) -> None:
        """The leg stopped being analysed: no more audio; its ring stays till hang-up."""
        with self._lock:
            leg = self._by_sid.pop(stream_id, None)
            if leg is not None:
                leg.active = False

    @property
    def recording(self) -> int:
        return len(self._by_sid)

    # ---- the tick (playout thread) -----------------------------------------------------

    def push(self, frames: PulledFrames) -> None:
        if not self._by_sid:
            return
        rows = {int(sid): row for row, sid in enumerate(frames.ids)}
        flags = frames.infos["flag"]
        cuts: list[tuple[_Call, _Pending]] = []
        with self._lock:
            for sid, leg in self._by_sid.items():
                at = leg.written % leg.ring.size
                row = rows.get(sid)
                if row is None:
                    leg.ring[at : at + FRAME] = 0  # missing from this pull
                elif int(flags[row]) == self._paused_flag:
                    leg.ring[at : at + FRAME] = 0  # never keep paused audio
                    leg.paused += FRAME
                else:
                    leg.ring[at : at + FRAME] = frames.pcm[row, :FRAME]
                leg.written += FRAME
            for call in self._calls.values():
                if not call.pending:
                    continue
                for p in list(call.pending):
                    source = call.legs.get(p.leg_id)
                    if source is None or source.written >= p.end:
                        call.pending.remove(p)
                        cuts.append((call, p))
        for call, p in cuts:
            self._cut(call, p)

    # ---- alerts (detector threads) ---------------------------------------------------

    def on_alert(self, alert: Alert) -> None:
        if (
            not self.settings.mode_for(alert.tenant).clip
            and not self.settings.mode_for(alert.tenant).embedding
        ):
            return
        with self._lock:
            call = self._calls.get(alert.call_id)
            if call is None:
                self.stats.missed += 1
                return
            first = alert.alert_id not in call.alerted
            call.alerted.add(alert.alert_id)
            if not first or not self.settings.mode_for(alert.tenant).clip or not alert.reasons:
                return
            legs = list(call.legs.values())
            if not legs:
                self.stats.missed += 1
                return
            leg = max(legs, key=lambda g: (g.active, g.written))
            w0 = min(r.start_s for r in alert.reasons)
            w1 = max(r.end_s for r in alert.reasons)
            start = int(max(0.0, w0 - self.settings.pre_s) * CLIP_RATE)
            end = int((w1 + self.settings.post_s) * CLIP_RATE)
            call.pending.append(_Pending(alert, leg.leg_id, start, end, (w0, w1)))

    # ---- hang-up (signalling thread, under the analysis lock) -------------------------

    def call_ending(self, call_id: str) -> None:
        """Before the runtime forgets the call: take the speaker aggregate if wanted."""
        with self._lock:
            call = self._calls.get(call_id)
        if call is None or self._embeddings is None:
            return
        if self.settings.mode_for(call.tenant).embedding:
            call.embedding = self._embeddings.aggregate(call_id)

    def call_ended(self, call_id: str) -> None:
        """After the call's last alerts: cut what is pending, store the embedding,
        free the rings."""
        with self._lock:
            call = self._calls.pop(call_id, None)
            if call is None:
                return
            for sid in [s for s, leg in self._by_sid.items() if leg.call_id == call_id]:
                del self._by_sid[sid]
            pending, call.pending = call.pending, []
        for p in pending:
            self._cut(call, p)
        if call.alerted and call.embedding is not None:
            self._store_embedding(call_id, call)

    # ---- records ------------------------------------------------------------------

    def _base(self, call_id: str, call: _Call, kind: EvidenceKind, eid: str) -> dict[str, object]:
        now = self._now()
        return {
            "kind": kind,
            "evidence_id": eid,
            "tenant": call.tenant,
            "call_id": call_id,
            "node_id": self._node,
            "created_at": now,
            "expires_at": now + timedelta(seconds=self.settings.ttl_s),
            "call_started_at": call.started_at,
        }

    def _cut(self, call: _Call, p: _Pending) -> None:
        leg = call.legs.get(p.leg_id)
        if leg is None:
            self.stats.missed += 1
            return
        first, audio = leg.cut(p.start, p.end)
        if not audio.size:
            self.stats.missed += 1
            return
        meta = EvidenceMeta.model_validate(
            self._base(leg.call_id, call, EvidenceKind.CLIP, f"clip:{p.alert.alert_id}")
            | {
                "tenant": p.alert.tenant,
                "alert_id": p.alert.alert_id,
                "leg_id": leg.leg_id,
                "leg_started_at": leg.started_at,
                "start_s": first / CLIP_RATE,
                "end_s": (first + audio.size) / CLIP_RATE,
                "alert_start_s": p.window[0],
                "alert_end_s": p.window[1],
                "samples": int(audio.size),
                "paused_s": leg.paused / CLIP_RATE,
            }
        )
        self._enqueue(meta, audio.astype("<i2").tobytes())

    def _store_embedding(self, call_id: str, call: _Call) -> None:
        assert call.embedding is not None
        vector, speech = call.embedding
        meta = EvidenceMeta.model_validate(
            self._base(call_id, call, EvidenceKind.EMBEDDING, "embedding")
            | {"model": self._model, "dim": int(vector.size), "net_speech_s": speech}
        )
        self._enqueue(meta, np.asarray(vector, "<f4").tobytes())

    def _enqueue(self, meta: EvidenceMeta, plain: bytes) -> None:
        try:
            self._queue.put_nowait((meta, plain))
        except queue.Full:
            self.stats.dropped += 1
            log.warning("evidence queue full: %s of call %s dropped", meta.kind, meta.call_id)

    # ---- the writer thread ------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, then stop."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def flush(self, timeout_s: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
            finally:
                self._queue.task_done()

    def _write(self, meta: EvidenceMeta, plain: bytes) -> None:
        blob = self._vault.seal(meta, plain)
        for attempt in range(3):
            try:
                self._writer.write(meta, blob)
            except Exception as exc:  # redis errors, a refused script: count, retry, drop
                if attempt == 2:
                    self.stats.failed += 1
                    log.error("evidence %s of call %s not stored: %s", meta.kind, meta.call_id, exc)
                    return
                time.sleep(0.2 * (attempt + 1))
                continue
            if meta.kind is EvidenceKind.CLIP:
                self.stats.clips += 1
            else:
                self.stats.embeddings += 1
            return
