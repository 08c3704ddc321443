"""In-band DTMF per 20 ms frame (issue 6): Goertzel powers at the eight DTMF
frequencies with ITU-T Q.24-style checks, for legs whose DTMF is only audio (no
RFC 4733, or an SBC that sends both: the bridge deduplicates).

Per leg and tick, the previous and the current frame (40 ms, Hann-windowed) give the
power at the 4 row and 4 column frequencies (one matrix product for all legs: the
Goertzel recurrence evaluated in closed form) and at their second harmonics. A hop
*hits* a key when:

- the strongest row and column tone each exceed ``MIN_TONE_POWER`` (about -43 dBm0),
- the two hold at least ``SHARE_MIN`` of the window's energy (speech spreads its
  energy over many harmonics and formants; two pure tones do not),
- each is ``PEER_DB`` above the next strongest tone of its group,
- twist: the column tone is at most ``NORMAL_TWIST_DB`` weaker, or at most
  ``REVERSE_TWIST_DB`` stronger, than the row tone,
- neither tone has a second harmonic within ``HARMONIC_DB`` of it (voiced speech does).

A key starts after ``ON_HOPS`` consecutive hits of it (a tone of about 40 ms) and ends
after ``OFF_HOPS`` hops without it (a window only half over the tone fails the checks,
so that is an inter-digit pause of at least 40 ms; a 20 ms dropout does not split a
key). ``InbandDtmf.update`` returns the keys that started or ended on the hop, as an
index 0..15 (``KEYS``); the caller turns it into a keyed token at
once and keeps nothing else. Cost per 20 ms tick: docs/models/dtmf_behaviour.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

RATE = 8000
FRAME = 160
WINDOW = 2 * FRAME
ROWS = (697.0, 770.0, 852.0, 941.0)
COLS = (1209.0, 1336.0, 1477.0, 1633.0)
KEYS = "123A456B789C*0#D"  # row-major: KEYS[4 * row + col]
NAV = frozenset({KEYS.index("*"), KEYS.index("#")})
OTHER = frozenset(KEYS.index(k) for k in "ABCD")
MIN_TONE_POWER = 2.0e4  # mean-square (int16 scale) of one tone: ~ -43 dBm0
SHARE_MIN = 0.75
PEER_DB = 8.0
NORMAL_TWIST_DB = 8.0  # column (high group) weaker than row
REVERSE_TWIST_DB = 4.0  # column stronger than row
HARMONIC_DB = 12.0
ON_HOPS = 2
CHUNK = 16
OFF_HOPS = 3  # a window half over the tone fails the checks: 3 misses = a pause of 40 ms

Ints = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class KeyChange:
    row: int  # the caller's row (leg) index
    key: int  # 0..15, KEYS index: turn it into a token at once, never keep it
    on: bool = True  # False: the key ended on this hop


def _basis(freqs: tuple[float, ...]) -> npt.NDArray[np.float32]:
    n = np.arange(WINDOW)
    w = np.hanning(WINDOW)
    cols = []
    for f in freqs:
        cols.append(w * np.cos(2 * np.pi * f * n / RATE))
        cols.append(w * np.sin(2 * np.pi * f * n / RATE))
    return np.stack(cols, axis=1).astype(np.float32)


class InbandDtmf:
    """Per-row state for ``max_rows`` legs (rows are the caller's, e.g. bank slots)."""

    def __init__(self, max_rows: int) -> None:
        tones = ROWS + COLS
        self._basis = _basis(tones + tuple(2 * f for f in tones))  # [320, 32]
        self._window = np.hanning(WINDOW).astype(np.float32)
        # a full-scale-normalised power: |X|^2 * 4 / (sum w)^2 is a tone's amplitude^2,
        # its mean square half of that
        self._scale = np.float32(2.0 / float(np.sum(self._window)) ** 2)
        self._energy_scale = np.float32(1.0 / float(np.sum(self._window)))
        self._prev = np.zeros((max_rows, FRAME), np.float32)
        self._cand = np.full(max_rows, -1, np.intp)  # key being confirmed
        self._hits = np.zeros(max_rows, np.intp)
        self._on = np.full(max_rows, -1, np.intp)  # key held now
        self._misses = np.zeros(max_rows, np.intp)

    def reset(self, rows: list[int]) -> None:
        self._prev[rows] = 0.0
        self._cand[rows] = -1
        self._hits[rows] = 0
        self._on[rows] = -1
        self._misses[rows] = 0

    def classify(self, rows: Ints, x: npt.NDArray[np.float32]) -> Ints:
        """One frame [n, 160] (int16 scale) of ``rows``: the key each hop hits, or -1."""
        two = np.concatenate([self._prev[rows], x], axis=1)
        self._prev[rows] = x
        # [n, 32]: (cos, sin) per frequency; in row chunks small enough that BLAS stays on
        # this thread (a threaded sgemm on the playout thread costs far more than it saves)
        proj = np.concatenate([two[i : i + CHUNK] @ self._basis for i in range(0, len(two), CHUNK)])
        pw = (proj[:, 0::2] ** 2 + proj[:, 1::2] ** 2) * self._scale  # mean square per tone
        energy = np.einsum("ij,ij->i", two * self._window, two) * self._energy_scale
        row_pw, col_pw, harm = pw[:, :4], pw[:, 4:8], pw[:, 8:]
        r = np.argmax(row_pw, axis=1)
        c = np.argmax(col_pw, axis=1)
        idx = np.arange(len(rows))
        rp, cp = row_pw[idx, r], col_pw[idx, c]
        r2 = np.sort(row_pw, axis=1)[:, -2]
        c2 = np.sort(col_pw, axis=1)[:, -2]
        peer = 10 ** (PEER_DB / 10)
        twist = cp / np.maximum(rp, 1e-9)
        ok = (
            (rp >= MIN_TONE_POWER)
            & (cp >= MIN_TONE_POWER)
            & (rp + cp >= SHARE_MIN * energy)
            & (rp >= peer * r2)
            & (cp >= peer * c2)
            & (twist >= 10 ** (-NORMAL_TWIST_DB / 10))
            & (twist <= 10 ** (REVERSE_TWIST_DB / 10))
            & (harm[idx, r] * 10 ** (HARMONIC_DB / 10) <= rp)
            & (harm[idx, 4 + c] * 10 ** (HARMONIC_DB / 10) <= cp)
        )
        return np.where(ok, 4 * r + c, -1).astype(np.intp)

    def update(self, rows: Ints, x: npt.NDArray[np.float32]) -> list[KeyChange]:
        """One frame of ``rows``: keys that started (``on``) or ended on this hop."""
        key = self.classify(rows, x)
        cand, hits, on, misses = (
            self._cand[rows],
            self._hits[rows],
            self._on[rows],
            self._misses[rows],
        )
        # the held key: a hop of it resets the misses; OFF_HOPS without it ends it
        held = (on >= 0) & (key == on)
        misses = np.where(held, 0, np.where(on >= 0, misses + 1, 0))
        ended = (on >= 0) & (misses >= OFF_HOPS)
        was = on
        on = np.where(ended, -1, on)
        # confirming a new key: ON_HOPS consecutive hits of the same key, while none is held
        same = (key >= 0) & (key == cand)
        hits = np.where(same, hits + 1, np.where(key >= 0, 1, 0))
        cand = np.where(key >= 0, key, -1)
        start = (on < 0) & (hits >= ON_HOPS)
        on = np.where(start, cand, on)
        misses = np.where(start, 0, misses)
        hits = np.where(start, 0, hits)
        cand = np.where(start, -1, cand)
        self._cand[rows], self._hits[rows], self._on[rows], self._misses[rows] = (
            cand,
            hits,
            on,
            misses,
        )
        if not (start.any() or ended.any()):
            return []
        out = [KeyChange(int(rows[i]), int(was[i]), False) for i in np.flatnonzero(ended)]
        return out + [KeyChange(int(rows[i]), int(on[i])) for i in np.flatnonzero(start)]
