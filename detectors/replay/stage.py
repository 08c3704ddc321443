"""The replay dimension and the benign audio allowlist, between the scheduler and
fusion (a ``ResultStage``; DESIGN §2, §5; issues 6 and 10).

A result of the replay fingerprinter (``detectors.replay.detector``) carries its
window's fingerprint; it is consumed here, for an EXTERNAL leg only:

1. Allowlist: where the tenant's benign audio (IVR prompts, hold music) covers at
   least ``allow_share`` of the window's valid frames, the window abstains
   ``allowlisted`` and its span is remembered for the leg, so synthetic_voice windows
   over the same audio abstain too.
2. Otherwise the window is matched against the call's own earlier audio (a replay
   within the call) and the recent fingerprints of other calls, on this and other
   bridges (a recording played into many calls), counting only audio another call heard
   earlier than this one (of two calls playing one recording, the later one replays).
   Only a match close and long enough to be the same recording counts
   (``ReplayConfig.keeps``: other voices saying the same scripted words align briefly at
   BERs a copy through a lossy channel also reaches, see ``docs/models/replay.md``).
   The best such match gives the score (BER 0.25 -> 0.5, BER 0 -> 1.0); the reason
   names the kind of match and how long ago, never another call's id or number (the
   pair of calls goes to the shared state's relation, read by the dashboard only).
3. Audio matched on other calls from at least ``candidate_anis`` distinct ANIs (keyed
   ANI hashes) is proposed once as an allowlist candidate for an admin to confirm.
4. The window's new audio (the part no earlier window of the leg covered) is published
   for later windows and other calls.

synthetic_voice results wait here (at most ``max_hold_s``, and never while the
tenant's allowlist is empty) until the leg's replay windows have reached their end
(within ``cover_slack_s``: the two detectors' windows differ by 37.5 ms in length), so
the allowlist decision covering them is known; the runtime cuts a replay window at
every utterance end where it cuts a synthetic_voice one, so the wait is the replay
lane's few milliseconds, not a hop; at hang-up ``drain`` hands over what
still waits. A result of any other detector passes untouched. The fingerprint never leaves this
object: results going on carry no embedding.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.bus.allowlist import Candidate
from detectors.contract import WindowResult
from detectors.replay.detector import NAME
from detectors.replay.fingerprint import (
    FRAME,
    RATE,
    Fingerprint,
    encode,
    frame_seconds,
    from_vector,
)
from detectors.replay.index import CallHistory, Clip, Match
from detectors.replay.shared_state import ReplayState

FIRST_FRAME_S = frame_seconds(1)  # fingerprint frame 0 starts one hop in
FRAME_S = FRAME / RATE  # one fingerprint frame's audio


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    allow_share: float = 0.5  # of a window's valid frames matched by allowlisted audio
    candidate_anis: int = 5  # distinct ANIs before audio is proposed as benign
    max_hold_s: float = 4.0  # how long a synthetic_voice result may wait for replay
    heard_before_s: float = 0.25  # another call must have heard the audio this much earlier
    cover_slack_s: float = 0.1  # replay windows this close to a window's end cover it
    # a replay is the same recording, not the same words: other TTS voices saying the same
    # text aligned at BER 0.15-0.2 over 2 s and more, copies through G.711 with 5 % loss
    # concealed stayed at p90 0.10 (docs/models/replay.md); a longer span bought nothing
    max_ber: float = 0.12  # score >= 0.76
    min_match_s: float = 0.64  # of audio valid in both
    node_id: str = "node"

    def keeps(self, match: Match) -> bool:
        """Whether a verified match is a replay (the same recording) under this rule."""
        return match.ber <= self.max_ber and frame_seconds(match.frames) >= self.min_match_s


@dataclass
class ReplayStats:
    windows: int = 0
    allowlisted: int = 0
    matched_within: int = 0
    matched_cross: int = 0
    synthetic_allowlisted: int = 0
    held_released_late: int = 0
    held_dropped: int = 0
    refused_leg: int = 0
    proposed: int = 0


@dataclass
class _Call:
    tenant: str
    owner: str
    ani_hash: str = ""
    history: CallHistory = field(default_factory=CallHistory)
    allowed: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # leg -> spans
    watermark: dict[str, float] = field(default_factory=dict)  # leg -> replay windows' end
    held: list[tuple[float, WindowResult]] = field(default_factory=list)


class ReplayStage:
    def __init__(
        self,
        state: ReplayState,
        config: ReplayConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.config = config or ReplayConfig()
        self._clock, self._wall = clock, wall
        self._calls: dict[str, _Call] = {}
        self._anis: dict[str, set[str]] = {}  # candidate id -> distinct ANI hashes seen
        self._lock = threading.Lock()
        self.stats = ReplayStats()

    # ---- calls ----------------------------------------------------------------------
    def open_call(self, call_id: str, tenant: str = "default") -> None:
        self.state.follow(tenant)
        with self._lock:
            self._calls.setdefault(call_id, _Call(tenant, call_id))

    def annotate(self, call_id: str, ani_hash: str = "", correlation_id: str | None = None) -> None:
        """The call's keyed ANI hash and correlation id (duplicate recordings of one
        call share it, so they never match each other as replays)."""
        with self._lock:
            call = self._calls.get(call_id)
            if call is not None:
                call.ani_hash = ani_hash or call.ani_hash
                call.owner = correlation_id or call.owner

    def drain(self, call_id: str) -> tuple[WindowResult, ...]:
        """At hang-up (before fusion closes the call): what is still held, judged with
        the allowlisted spans known now."""
        with self._lock:
            call = self._calls.get(call_id)
            if call is None:
                return ()
            held, call.held = call.held, []
            return tuple(self._judge(call, r) for _, r in held)

    def end_call(self, call_id: str) -> None:
        with self._lock:
            call = self._calls.pop(call_id, None)
            if call is not None:
                self.stats.held_dropped += len(call.held)

    # ---- the runtime's stage --------------------------------------------------------
    def process(self, result: WindowResult) -> tuple[WindowResult, ...]:
        if result.detector == NAME:
            out = self._replay(result)
            return (*out, *self._release(result.key.call_id, result.key.leg_id))
        if result.dimension is Dimension.SYNTHETIC_VOICE and result.score is not None:
            return self._synthetic(result)
        return (result,)

    def _replay(self, result: WindowResult) -> tuple[WindowResult, ...]:
        key = result.key
        bare = replace(result, embedding=None)
        with self._lock:
            call = self._calls.get(key.call_id)
            if call is not None:
                mark = call.watermark.get(key.leg_id, 0.0)
                call.watermark[key.leg_id] = max(mark, key.end_s)
        if result.embedding is None or result.score is None or call is None:
            return (bare,)
        if key.role is not LegRole.EXTERNAL:
            self.stats.refused_leg += 1
            return (bare,)
        self.stats.windows += 1
        fp = from_vector(result.embedding)
        allow = self.state.allowlist(call.tenant)
        if allow is not None:
            share, spans = _coverage(fp, allow.query(fp), key.start_s)
            if share >= self.config.allow_share:
                with self._lock:
                    call.allowed.setdefault(key.leg_id, []).extend(spans)
                self.stats.allowlisted += 1
                return (
                    replace(
                        bare,
                        score=None,
                        abstained=Abstention.ALLOWLISTED,
                        reasons=(f"benign audio allowlist: {share:.0%} of the window",),
                    ),
                )
        keeps = self.config.keeps
        within = [m for m in call.history.index.query(fp, before_s=key.start_s) if keeps(m)]
        cross = [m for m in self._heard_before(call, fp, key.end_s - key.start_s) if keeps(m)]
        self._candidates(call, fp, cross)
        self._publish(call, key.leg_id, fp, key.start_s)
        best, kind = _best(within, cross)
        if best is None:
            return (replace(bare, score=0.0),)
        if kind == "within":
            self.stats.matched_within += 1
            ago = key.start_s - best.clip.start_s
            what = f"the same audio earlier in this call ({ago:.0f} s before)"
        else:
            self.stats.matched_cross += 1
            self.state.relate(call.owner, best.clip.owner)
            ago = max(0.0, self._wall() - best.clip.seen_at)
            what = f"the same audio on another call {_ago(ago)}"
        score = float(np.clip(1.0 - 2.0 * best.ber, 0.0, 1.0))
        detail = f"replay: {what}, BER {best.ber:.2f} over {best.frames * 0.016:.1f} s"
        return (replace(bare, score=score, reasons=(detail,)),)

    def _heard_before(self, call: _Call, fp: Fingerprint, window_s: float) -> list[Match]:
        """Other calls' matches whose audio was heard before this window heard it: of two
        calls playing one recording, only the later one replays the earlier."""
        now = self._wall()
        out = []
        for m in self.state.recent().query(fp, exclude_owner=call.owner):
            other_start = m.clip.seen_at - frame_seconds(len(m.clip.fp)) - FRAME_S
            other = other_start + frame_seconds(m.query_first + m.offset)
            mine = now - window_s + FIRST_FRAME_S + frame_seconds(m.query_first)
            if other < mine - self.config.heard_before_s:
                out.append(m)
        return out

    def _publish(self, call: _Call, leg_id: str, fp: Fingerprint, start_s: float) -> None:
        """The part of the window no earlier window of the leg covered."""
        with self._lock:
            done = call.history.covered_to.get(leg_id, 0.0)
            first = max(0, int(np.ceil((done - start_s - FIRST_FRAME_S) / frame_seconds(1))))
            end = start_s + FIRST_FRAME_S + frame_seconds(len(fp))
            call.history.covered_to[leg_id] = max(done, end)
        if first >= len(fp):
            return
        part = fp.slice(first, len(fp))
        if part.valid_count == 0:
            return
        clip_start = start_s + FIRST_FRAME_S + frame_seconds(first)
        raw = f"{self.config.node_id}|{call.owner}|{leg_id}|{clip_start:.3f}"
        clip = Clip(
            "fp_" + hashlib.sha256(raw.encode()).hexdigest()[:20],
            part,
            call.owner,
            self._wall(),
            clip_start,
            call.ani_hash,
            call.tenant,
        )
        call.history.index.add([clip])
        self.state.publish(clip)

    def _candidates(self, call: _Call, fp: Fingerprint, cross: list[Match]) -> None:
        if not cross:
            return
        anchor = min((m.clip for m in cross), key=lambda c: (c.seen_at, c.clip_id))
        cand_id = "fc_" + hashlib.sha256(anchor.clip_id.encode()).hexdigest()[:16]
        if self.state.known_candidate(call.tenant, cand_id):
            return
        with self._lock:
            anis = self._anis.setdefault(cand_id, set())
            anis.update(m.clip.ani_hash for m in cross if m.clip.ani_hash)
            if call.ani_hash:
                anis.add(call.ani_hash)
            calls = 1 + len({m.clip.owner for m in cross})
            if len(anis) < self.config.candidate_anis:
                return
            count = len(anis)
            del self._anis[cand_id]
        best = cross[0]
        part = fp.slice(best.query_first, best.query_last + 1)
        now = datetime.fromtimestamp(self._wall(), UTC)
        first = datetime.fromtimestamp(min(m.clip.seen_at for m in cross), UTC)
        self.state.propose(
            Candidate(
                cand_id=cand_id,
                tenant=call.tenant,
                fingerprint=encode(part),
                frames=len(part),
                distinct_anis=count,
                calls=calls,
                first_seen=first,
                last_seen=now,
                node_id=self.config.node_id,
            )
        )
        self.stats.proposed += 1

    # ---- synthetic_voice over allowlisted audio -------------------------------------
    def _synthetic(self, result: WindowResult) -> tuple[WindowResult, ...]:
        key = result.key
        with self._lock:
            call = self._calls.get(key.call_id)
            if call is None:
                return (result,)
            allow = self.state.allowlist(call.tenant)
            if (allow is None or len(allow) == 0) and not call.allowed.get(key.leg_id):
                return (result,)  # nothing to match: no reason to wait
            if call.watermark.get(key.leg_id, -1.0) < key.end_s - self.config.cover_slack_s:
                call.held.append((self._clock(), result))
                return self._release_expired(call)
            return (self._judge(call, result),)

    def _judge(self, call: _Call, result: WindowResult) -> WindowResult:
        key = result.key
        spans = call.allowed.get(key.leg_id, [])
        covered = _covered(spans, key.start_s, key.end_s)
        if covered >= self.config.allow_share * (key.end_s - key.start_s):
            self.stats.synthetic_allowlisted += 1
            return replace(
                result,
                score=None,
                abstained=Abstention.ALLOWLISTED,
                reasons=("benign audio allowlist",),
            )
        return result

    def _release(self, call_id: str, leg_id: str) -> tuple[WindowResult, ...]:
        with self._lock:
            call = self._calls.get(call_id)
            if call is None or not call.held:
                return ()
            mark = call.watermark.get(leg_id, 0.0)
            slack = self.config.cover_slack_s
            due = [(r.key.leg_id == leg_id and r.key.end_s - slack <= mark) for _, r in call.held]
            ready = [r for (_, r), d in zip(call.held, due, strict=True) if d]
            call.held = [h for h, d in zip(call.held, due, strict=True) if not d]
            out = [self._judge(call, r) for r in ready]
            return (*out, *self._release_expired(call))

    def _release_expired(self, call: _Call) -> tuple[WindowResult, ...]:
        """Held too long (the replay lane is late or failing): let them through."""
        now = self._clock()
        late = [r for t, r in call.held if now - t > self.config.max_hold_s]
        if late:
            call.held = [(t, r) for t, r in call.held if now - t <= self.config.max_hold_s]
            self.stats.held_released_late += len(late)
        return tuple(self._judge(call, r) for r in late)


def _coverage(
    fp: Fingerprint, matches: list[Match], start_s: float
) -> tuple[float, list[tuple[float, float]]]:
    """Share of the window's valid frames inside matched spans, and those spans in the
    leg's time."""
    if not matches or fp.valid_count == 0:
        return 0.0, []
    hit = np.zeros(len(fp), bool)
    spans = []
    for m in matches:
        hit[m.query_first : m.query_last + 1] = True
        spans.append(
            (
                start_s + FIRST_FRAME_S + frame_seconds(m.query_first),
                start_s + FIRST_FRAME_S + frame_seconds(m.query_last) + 0.256,
            )
        )
    return float(np.count_nonzero(hit & fp.valid)) / fp.valid_count, spans


def _covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] inside the union of ``spans``."""
    if not spans:
        return 0.0
    cut = sorted((max(s, start), min(e, end)) for s, e in spans if e > start and s < end)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in cut:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _best(within: list[Match], cross: list[Match]) -> tuple[Match | None, str]:
    w = within[0] if within else None
    c = cross[0] if cross else None
    if w is None:
        return c, "cross"
    if c is None or w.ber <= c.ber:
        return w, "within"
    return c, "cross"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
