"""An in-process index of fingerprinted clips: exact sub-fingerprint lookups propose
(clip, offset) candidates, the bit error rate of the aligned sequences decides.

Clips are added in *segments* (a batch of clips sealed into sorted arrays of their
valid sub-fingerprints, with the clip and frame of each), so a query is a few
vectorised ``searchsorted`` calls whatever the index's size, and retention drops whole
segments, oldest first. Readers never lock: a segment list is replaced, never changed
in place (writers hold the index's lock among themselves).

Matching (Haitsma & Kalker's search): every valid query frame looks up the frames with
the very same 32 bits; hits vote for (clip, ref frame - query frame); the best offsets
with at least ``min_votes`` votes are verified by the BER over the aligned frames valid
in both, over at least ``min_frames`` frames. Sub-fingerprints shared by too many frames
(``max_postings``: steady tones, near-silence that passed the gate) propose nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from detectors.replay.fingerprint import Fingerprint, bit_errors

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Clip:
    """A fingerprinted stretch of audio and where it came from. ``owner``: the call
    (correlation) key, or the allowlist entry / candidate id; ``start_s``: its frame 0
    in the owner's timeline; ``seen_at``: wall-clock seconds."""

    clip_id: str
    fp: Fingerprint
    owner: str
    seen_at: float
    start_s: float = 0.0
    ani_hash: str = ""
    tenant: str = "default"

    @property
    def end_s(self) -> float:
        from detectors.replay.fingerprint import frame_seconds

        return self.start_s + frame_seconds(len(self.fp))


@dataclass(frozen=True, slots=True)
class Match:
    clip: Clip
    offset: int  # ref frame = query frame + offset
    ber: float
    frames: int  # compared (valid in both)
    votes: int
    query_first: int  # first and last aligned query frame
    query_last: int


@dataclass(frozen=True, slots=True)
class _Segment:
    keys: npt.NDArray[np.uint32]  # sorted
    clip: npt.NDArray[np.int32]  # index into the segment's clips
    pos: npt.NDArray[np.int32]
    clips: tuple[Clip, ...]
    newest: float


@dataclass(frozen=True, slots=True)
class MatchConfig:
    min_votes: int = 2
    max_ber: float = 0.25
    min_frames: int = 40  # 0.64 s of audio valid in both
    max_candidates: int = 8
    max_postings: int = 256


@dataclass
class IndexStats:
    clips: int = 0
    frames: int = 0
    segments: int = 0
    queries: int = 0
    verified: int = 0


class FingerprintIndex:
    def __init__(self, config: MatchConfig | None = None, max_frames: int = 5_000_000) -> None:
        self.config = config or MatchConfig()
        self.max_frames = max_frames
        self._segments: tuple[_Segment, ...] = ()
        self._lock = threading.Lock()
        self.stats = IndexStats()
        self.version = 0  # bumped by every change

    def __len__(self) -> int:
        return sum(len(s.clips) for s in self._segments)

    def clips(self) -> list[Clip]:
        return [c for s in self._segments for c in s.clips]

    # ---- writers ----------------------------------------------------------------------
    def add(self, clips: list[Clip]) -> None:
        """Seal ``clips`` into one new segment (dropping the oldest over ``max_frames``)."""
        clips = [c for c in clips if c.fp.valid_count]
        if not clips:
            return
        keys, idx, pos = [], [], []
        for i, c in enumerate(clips):
            frames = np.flatnonzero(c.fp.valid).astype(np.int32)
            keys.append(c.fp.bits[frames])
            idx.append(np.full(frames.size, i, np.int32))
            pos.append(frames)
        k = np.concatenate(keys)
        order = np.argsort(k, kind="stable")
        seg = _Segment(
            k[order],
            np.concatenate(idx)[order],
            np.concatenate(pos)[order],
            tuple(clips),
            max(c.seen_at for c in clips),
        )
        with self._lock:
            segments = [*self._segments, seg]
            total = sum(s.keys.size for s in segments)
            while len(segments) > 1 and total > self.max_frames:
                total -= segments.pop(0).keys.size
            self._publish(segments)

    def replace(self, clips: list[Clip]) -> None:
        """The whole content at once (an allowlist reload)."""
        with self._lock:
            self._publish([])
        self.add(clips)
        if not clips:
            with self._lock:
                self.version += 1

    def expire(self, before: float) -> int:
        """Drop segments whose newest clip was seen before ``before``; clips dropped."""
        with self._lock:
            keep = [s for s in self._segments if s.newest >= before]
            gone = sum(len(s.clips) for s in self._segments) - sum(len(s.clips) for s in keep)
            if gone:
                self._publish(keep)
            return gone

    def _publish(self, segments: list[_Segment]) -> None:
        self._segments = tuple(segments)
        self.stats.segments = len(segments)
        self.stats.clips = sum(len(s.clips) for s in segments)
        self.stats.frames = sum(s.keys.size for s in segments)
        self.version += 1

    # ---- readers ----------------------------------------------------------------------
    def query(
        self, fp: Fingerprint, exclude_owner: str = "", before_s: float | None = None
    ) -> list[Match]:
        """Verified matches, best (lowest BER) first. ``exclude_owner``: ignore that
        owner's clips; ``before_s``: only clips ending at or before it (within a call:
        earlier audio only)."""
        cfg = self.config
        self.stats.queries += 1
        qpos = np.flatnonzero(fp.valid)
        if qpos.size == 0:
            return []
        qkeys = fp.bits[qpos]
        out: list[Match] = []
        for seg in self._segments:
            lo = np.searchsorted(seg.keys, qkeys, "left")
            hi = np.searchsorted(seg.keys, qkeys, "right")
            n = hi - lo
            ok = (n > 0) & (n <= cfg.max_postings)
            if not ok.any():
                continue
            lo, n, qp = lo[ok], n[ok], qpos[ok]
            rows = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
            clip = seg.clip[rows].astype(np.int64)
            offset = seg.pos[rows].astype(np.int64) - np.repeat(qp, n)
            pair = clip * 1_000_000 + (offset + 500_000)
            uniq, votes = np.unique(pair, return_counts=True)
            best = np.argsort(-votes, kind="stable")[: cfg.max_candidates]
            for j in best:
                if votes[j] < cfg.min_votes:
                    break
                c = seg.clips[int(uniq[j] // 1_000_000)]
                if c.owner and c.owner == exclude_owner:
                    continue
                if before_s is not None and c.end_s > before_s:
                    continue
                m = self._verify(fp, c, int(uniq[j] % 1_000_000) - 500_000, int(votes[j]))
                if m is not None:
                    out.append(m)
        out.sort(key=lambda m: (m.ber, -m.frames))
        return out

    def _verify(self, fp: Fingerprint, clip: Clip, offset: int, votes: int) -> Match | None:
        cfg = self.config
        q0 = max(0, -offset)
        n = min(len(fp) - q0, len(clip.fp) - (q0 + offset))
        if n <= 0:
            return None
        q = fp.slice(q0, q0 + n)
        errors, m = bit_errors(q, clip.fp.slice(q0 + offset, q0 + offset + n))
        self.stats.verified += 1
        if m < cfg.min_frames:
            return None
        rate = errors / (32 * m)
        if rate > cfg.max_ber:
            return None
        both = np.flatnonzero(q.valid & clip.fp.valid[q0 + offset : q0 + offset + n])
        return Match(clip, offset, rate, m, votes, q0 + int(both[0]), q0 + int(both[-1]))


@dataclass
class CallHistory:
    """One call's own earlier audio (replay within a call), dropped at hang-up."""

    index: FingerprintIndex = field(default_factory=lambda: FingerprintIndex(max_frames=200_000))
    covered_to: dict[str, float] = field(default_factory=dict)  # leg -> published up to
