"""The dtmf_behaviour dimension (DESIGN §2, issue 6): IVR probing and PIN or account
guessing from the *structure* of a call's key presses, never the digits.

Input per key press: when it started (monotonic ns), how long it lasted (ms, 0 when
unknown), an opaque per-call token (the RFC 4733 tracker's keyed permutation, or the
in-band detector's key through this call's keyed hash) and its kind (digit,
navigation ``*``/``#``, other). Tokens of one entry are held only until the entry is
complete; then they are replaced by one keyed hash (HMAC-SHA-256 under a per-call
random key that lives in this object only), enough to tell "the same entry again" from
"a different entry of the same length", and dropped.

Entries: consecutive digits; one ends at a navigation key or ``entry_gap_s`` after its
last key ended (started, where the end is unknown). Features over the last ``horizon_s``:

- ``guess``: distinct entries of one length (3 to 12 digits): PIN and account
  guessing (12 different 4-digit PINs in 90 s) — a customer enters an account number
  and a PIN once, maybe retyped once or twice;
- ``regular``: inter-digit start-to-start intervals (within entries) so regular that
  no hand typed them (coefficient of variation below ``regular_cv``): automated
  probing;
- ``fast``: a median inter-digit interval under ``fast_s``: machine dialling bursts;
- ``menu``: many short entries (1-2 digits) and navigation keys: walking an IVR tree.

Each feature maps to a sub-score in [0, 1]; the score is their noisy-or. A result is
emitted at each completed entry (the score is the call's state so far, not the entry's
alone); no key presses, no result (the dimension abstains by silence). Reasons name
counts and timings, never a digit, a token or a hash.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets
import statistics
from collections import deque
from dataclasses import dataclass, field

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import WindowKey, WindowQuality, WindowResult

NAME = "dtmf_behaviour"
VERSION = "structural-1"
KIND_DIGIT, KIND_NAV, KIND_OTHER = 0, 1, 2


@dataclass(frozen=True, slots=True)
class DtmfConfig:
    entry_gap_s: float = 2.0  # no key for this long ends an entry
    horizon_s: float = 180.0  # features look this far back
    guess_from: int = 2  # distinct same-length entries that are still normal
    guess_full: int = 8  # ... and the count that scores 1.0
    min_intervals: int = 8  # for the timing features
    regular_cv: float = 0.08  # below: machine-regular
    regular_score: float = 0.7
    fast_s: float = 0.12  # median start-to-start below: a machine burst
    fast_score: float = 0.6
    menu_from: int = 6  # short entries + navigation keys that are still normal
    menu_full: int = 20
    menu_score: float = 0.8
    threshold: float = 0.5


@dataclass(frozen=True, slots=True)
class _Entry:
    start_ns: int
    end_ns: int
    length: int
    digest: bytes  # keyed hash of the entry's tokens (never the tokens)
    intervals: tuple[float, ...]  # start-to-start seconds between its keys


@dataclass(slots=True)
class _Pending:
    tokens: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    last_ns: int = 0


@dataclass(frozen=True, slots=True)
class Features:
    entries: int
    max_same_length_distinct: int
    same_length: int  # the length with the most distinct entries (0: none)
    span_s: float  # first to last entry of that length
    intervals: int
    interval_cv: float | None
    median_interval_s: float | None
    short_entries: int
    nav_keys: int


class DtmfCall:
    """One call's key presses (one leg: the caller's). Not thread-safe."""

    def __init__(
        self, call_id: str, leg_id: str, origin_ns: int, config: DtmfConfig = DtmfConfig()
    ) -> None:
        self.call_id, self.leg_id, self.origin_ns, self.config = call_id, leg_id, origin_ns, config
        self._key = secrets.token_bytes(32)
        self._pending = _Pending()
        self._entries: deque[_Entry] = deque()
        self._nav: deque[int] = deque()
        self.keys = 0

    @property
    def typing(self) -> bool:
        """An entry is being typed (not yet closed)."""
        return bool(self._pending.tokens)

    def press(self, at_ns: int, token: int, kind: int, end_ns: int = 0) -> WindowResult | None:
        """One key press starting at ``at_ns`` (ending at ``end_ns`` where known: the
        entry gap counts from there); returns a result when it completed an entry."""
        self.keys += 1
        done = self.flush(at_ns)
        if kind == KIND_NAV:
            self._nav.append(at_ns)
            done = self._close(at_ns) or done
            return done
        p = self._pending
        p.tokens.append(token if kind == KIND_DIGIT else 0x8000 | token)
        p.starts.append(at_ns)
        p.last_ns = max(at_ns, end_ns)
        return done

    def flush(self, now_ns: int) -> WindowResult | None:
        """Close the pending entry if no key came for ``entry_gap_s`` (call each tick)."""
        p = self._pending
        if p.tokens and now_ns - p.last_ns >= self.config.entry_gap_s * 1e9:
            return self._close(now_ns)
        return None

    def _close(self, now_ns: int) -> WindowResult | None:
        p = self._pending
        if not p.tokens:
            return None
        raw = b"".join((t & 0xFFFF).to_bytes(2, "big") for t in p.tokens)
        digest = hmac.new(self._key, raw, hashlib.sha256)
        del raw
        starts = p.starts
        entry = _Entry(
            starts[0],
            starts[-1],
            len(p.tokens),
            digest.digest()[:16],
            tuple((b - a) / 1e9 for a, b in itertools.pairwise(starts)),
        )
        p.tokens.clear()  # the tokens go: only the keyed hash stays
        p.starts = []
        self._entries.append(entry)
        self._forget(now_ns)
        return self._result(entry)

    def _forget(self, now_ns: int) -> None:
        horizon = int(self.config.horizon_s * 1e9)
        while self._entries and now_ns - self._entries[0].end_ns > horizon:
            self._entries.popleft()
        while self._nav and now_ns - self._nav[0] > horizon:
            self._nav.popleft()

    def features(self) -> Features:
        by_len: dict[int, dict[bytes, list[int]]] = {}
        for e in self._entries:
            if 3 <= e.length <= 12:
                by_len.setdefault(e.length, {}).setdefault(e.digest, []).append(e.start_ns)
        best_len, best, span = 0, 0, 0.0
        for length, groups in by_len.items():
            if len(groups) > best:
                times = [t for ts in groups.values() for t in ts]
                best_len, best, span = length, len(groups), (max(times) - min(times)) / 1e9
        gaps = [g for e in self._entries for g in e.intervals]
        cv = med = None
        if len(gaps) >= self.config.min_intervals:
            mean = statistics.fmean(gaps)
            cv = statistics.pstdev(gaps) / mean if mean > 0 else 0.0
            med = statistics.median(gaps)
        return Features(
            entries=len(self._entries),
            max_same_length_distinct=best,
            same_length=best_len,
            span_s=span,
            intervals=len(gaps),
            interval_cv=cv,
            median_interval_s=med,
            short_entries=sum(1 for e in self._entries if e.length <= 2),
            nav_keys=len(self._nav),
        )

    def score(self) -> tuple[float, tuple[str, ...]]:
        c, f = self.config, self.features()
        parts: list[tuple[float, str]] = []
        if f.max_same_length_distinct > c.guess_from:
            s = min(
                1.0, (f.max_same_length_distinct - c.guess_from) / (c.guess_full - c.guess_from)
            )
            parts.append(
                (
                    s,
                    f"{f.max_same_length_distinct} distinct {f.same_length}-digit entries "
                    f"in {f.span_s:.0f} s (guessing)",
                )
            )
        if f.interval_cv is not None and f.interval_cv < c.regular_cv:
            parts.append(
                (
                    c.regular_score,
                    f"inter-digit timing CV {f.interval_cv:.3f} over {f.intervals} intervals "
                    "(machine-regular)",
                )
            )
        if f.median_interval_s is not None and f.median_interval_s < c.fast_s:
            parts.append(
                (
                    c.fast_score,
                    f"median inter-digit interval {f.median_interval_s * 1000:.0f} ms "
                    f"over {f.intervals} intervals (machine-fast)",
                )
            )
        menu = f.short_entries + f.nav_keys
        if menu > c.menu_from:
            s = c.menu_score * min(1.0, (menu - c.menu_from) / (c.menu_full - c.menu_from))
            parts.append(
                (
                    s,
                    f"{f.short_entries} short entries and {f.nav_keys} */# keys "
                    f"in {c.horizon_s:.0f} s (menu probing)",
                )
            )
        miss = 1.0
        for s, _ in parts:
            miss *= 1.0 - s
        reasons = tuple(why for _, why in parts) or (f"{f.entries} entries, no pattern",)
        return round(1.0 - miss, 4), reasons

    def _result(self, entry: _Entry) -> WindowResult:
        score, reasons = self.score()
        start = max(0.0, (entry.start_ns - self.origin_ns) / 1e9)
        end = max(start, (entry.end_ns - self.origin_ns) / 1e9)
        return WindowResult(
            key=WindowKey(self.call_id, self.leg_id, LegRole.EXTERNAL, start, end),
            detector=NAME,
            model_version=VERSION,
            dimension=Dimension.DTMF_BEHAVIOUR,
            provider="numpy",
            score=score,
            threshold=self.config.threshold,
            abstained=None,
            quality=WindowQuality(),
            reasons=reasons,
        )

    def wipe(self) -> None:
        """Hang-up: forget the key and everything derived from it."""
        self._key = b""
        self._pending = _Pending()
        self._entries.clear()
        self._nav.clear()
