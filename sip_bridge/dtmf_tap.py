"""A live call's DTMF to the dtmf_behaviour dimension (issue 6), on the playout thread.

Per analysed leg (never an internal one: ``Analysis`` hands only the legs it
registered), every tick:

- in-band: the leg's 8 kHz frame goes through the Goertzel detector
  (``detectors.dtmf.goertzel``); a key it confirms becomes a token through a per-leg
  random permutation at once (the key index is dropped) and waits until ``hold_ms``
  after the tone ended (a key held down for seconds still waits for its end);
- RFC 4733: every ``poll_every`` ticks (staggered over legs) the leg's tracker
  events are taken (keyed tokens from C, never digits);
- deduplication: an in-band key that an RFC 4733 event of the same leg overlaps
  (first seen from ``dedup_ms`` before the tone's start to ``hold_ms`` after its end:
  the tone plays out after the jitter buffer's delay, the event arrives before, and the
  tracker reports it at its end packet, so by the tone's end it is there, and a late
  sender has ``hold_ms`` more) is dropped, so an SBC sending both counts each key once;
- the leg's ``DtmfCall`` gets the presses and is flushed; completed entries' results
  go to ``deliver`` (the runtime's fusion path) after the bridge's locks are released.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from detectors.contract import WindowResult
from detectors.dtmf.behaviour import KIND_DIGIT, KIND_NAV, KIND_OTHER, DtmfCall, DtmfConfig
from detectors.dtmf.goertzel import FRAME, NAV, ON_HOPS, OTHER, InbandDtmf
from native.ingest import Ingest, PulledFrames

HOP_NS = 20_000_000
INBAND_TOKEN = 0x4000  # in-band tokens live apart from the C tracker's (0..16, 0xFF)


@dataclass(slots=True)
class _Leg:
    slot: int
    call: DtmfCall
    perm: list[int]  # in-band key index -> token (per leg, random)
    rfc_seen: deque[int] = field(default_factory=lambda: deque(maxlen=64))  # first_seen_ns
    # in-band keys waiting: [start_ns, end_ns (0 while the tone lasts), token, kind]
    held: deque[list[int]] = field(default_factory=deque)


@dataclass
class DtmfTapStats:
    rfc_events: int = 0
    inband_keys: int = 0
    inband_deduplicated: int = 0
    results: int = 0
    errors: int = 0


class DtmfTap:
    def __init__(
        self,
        ingest: Ingest,
        max_legs: int = 1024,
        config: DtmfConfig | None = None,
        poll_every: int = 5,
        hold_ms: int = 300,
        dedup_ms: int = 600,
    ) -> None:
        self.ingest, self.config = ingest, config or DtmfConfig()
        self.poll_every, self.hold_ns, self.dedup_ns = poll_every, hold_ms * 10**6, dedup_ms * 10**6
        self.inband = InbandDtmf(max_legs)
        self._free = list(range(max_legs - 1, -1, -1))
        self._legs: dict[int, _Leg] = {}  # stream id -> state
        self._busy: set[int] = set()  # legs with a key held or an entry being typed
        self._tick = 0
        self._version = 0  # legs changed: the row layout is rebuilt
        self._layout_ids: object = None
        self._layout_version = -1
        self._rows = self._slots = np.zeros(0, np.intp)
        self._by_slot: dict[int, tuple[int, _Leg]] = {}
        self._phases: list[list[int]] = [[] for _ in range(poll_every)]
        self.stats = DtmfTapStats()

    def sync(self, legs: Mapping[int, tuple[str, str]], now_ns: int) -> None:
        """The analysed legs now: stream id -> (call id, leg id)."""
        for sid in [s for s, leg in self._legs.items() if s not in legs]:
            self._drop(sid)
        for sid, (call_id, leg_id) in legs.items():
            leg = self._legs.get(sid)
            if leg is not None and (leg.call.call_id, leg.call.leg_id) == (call_id, leg_id):
                continue
            if leg is not None:
                self._drop(sid)
            if not self._free:
                self.stats.errors += 1
                continue
            slot = self._free.pop()
            self.inband.reset([slot])
            perm = random.SystemRandom().sample(range(16), 16)
            self._legs[sid] = _Leg(slot, DtmfCall(call_id, leg_id, now_ns, self.config), perm)
            self._version += 1

    def _drop(self, sid: int) -> None:
        leg = self._legs.pop(sid)
        self._busy.discard(sid)
        self._version += 1
        leg.call.wipe()
        leg.perm.clear()
        leg.held.clear()
        self.inband.reset([leg.slot])
        self._free.append(leg.slot)

    def push(self, now_ns: int, frames: PulledFrames) -> list[WindowResult]:
        """One tick; returns the results to deliver (outside the bridge's locks)."""
        out: list[WindowResult] = []
        self._tick += 1
        if not self._legs:
            return out
        legs = self._legs
        if frames.ids is not self._layout_ids or self._layout_version != self._version:
            self._relayout(frames)
        rows, slots = self._rows, self._slots
        if rows.size:
            ok = frames.infos["samples"][rows] == FRAME  # 8 kHz legs only
            if not ok.all():
                rows, slots = rows[ok], slots[ok]
            pcm = frames.pcm[rows, :FRAME].astype(np.float32)
            for ch in self.inband.update(slots, pcm):
                self._key_change(self._by_slot[ch.row], ch.on, ch.key, now_ns)
        for sid in self._phases[self._tick % self.poll_every]:
            self._poll(sid, legs[sid], out)
        for sid in list(self._busy):
            leg = legs[sid]
            if leg.held:
                self._release(leg, now_ns, out)
            r = leg.call.flush(now_ns) if not leg.held else None  # a held key may extend it
            if r is not None:
                out.append(r)
            if not leg.held and not leg.call.typing:
                self._busy.discard(sid)
        self.stats.results += len(out)
        return out

    def _relayout(self, frames: PulledFrames) -> None:
        rows, slots = [], []
        for row, sid in enumerate(frames.ids.tolist()):
            leg = self._legs.get(sid)
            if leg is not None:
                rows.append(row)
                slots.append(leg.slot)
        self._rows, self._slots = np.asarray(rows, np.intp), np.asarray(slots, np.intp)
        self._by_slot = {leg.slot: (sid, leg) for sid, leg in self._legs.items()}
        self._phases = [[] for _ in range(self.poll_every)]
        for sid, leg in self._legs.items():
            self._phases[leg.slot % self.poll_every].append(sid)
        self._layout_ids, self._layout_version = frames.ids, self._version

    def _key_change(self, owner: tuple[int, _Leg], on: bool, key: int, now_ns: int) -> None:
        sid, leg = owner
        if not on:  # the tone ended: its key may go after hold_ms
            for held in leg.held:
                if held[1] == 0:
                    held[1] = now_ns
            return
        kind = KIND_NAV if key in NAV else KIND_OTHER if key in OTHER else KIND_DIGIT
        start = now_ns - ON_HOPS * HOP_NS  # the tone began about ON_HOPS hops ago
        leg.held.append([start, 0, INBAND_TOKEN | leg.perm[key], kind])
        self._busy.add(sid)
        self.stats.inband_keys += 1

    def _poll(self, sid: int, leg: _Leg, out: list[WindowResult]) -> None:
        try:
            events = self.ingest.take_dtmf(sid)
        except OSError:
            self.stats.errors += 1
            return
        if events:
            self._busy.add(sid)
        for ev in events:
            at = int(ev["first_seen_ns"])
            leg.rfc_seen.append(at)
            self.stats.rfc_events += 1
            end = at + int(ev["duration_ms"]) * 1_000_000
            r = leg.call.press(at, int(ev["token"]), int(ev["kind"]), end)
            if r is not None:
                out.append(r)

    def _release(self, leg: _Leg, now_ns: int, out: list[WindowResult]) -> None:
        while leg.held and leg.held[0][1] and now_ns - leg.held[0][1] >= self.hold_ns:
            at, end, token, kind = leg.held.popleft()
            if any(at - self.dedup_ns <= t <= end + self.hold_ns for t in leg.rfc_seen):
                self.stats.inband_deduplicated += 1
                continue
            r = leg.call.press(at, token, kind, end)
            if r is not None:
                out.append(r)
