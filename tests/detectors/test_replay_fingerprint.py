"""The audio fingerprint on real 8 kHz speech: the same audio through G.711 (at another
level, 20 ms later) keeps its fingerprint; different utterances do not match; the
index finds the copy and nothing else; the encodings round-trip exactly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from detectors.replay.fingerprint import (
    HOP,
    RATE,
    Fingerprint,
    best_alignment,
    decode,
    encode,
    fingerprint,
    from_vector,
    to_vector,
)
from detectors.replay.index import Clip, FingerprintIndex
from native.codec import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

F32 = npt.NDArray[np.float32]


@pytest.fixture(scope="module")
def utterances(prompt_utterances: list[F32]) -> list[F32]:
    """Real utterances of at least 2 s (Asterisk prompts: one speaker, different text)."""
    out = prompt_utterances
    assert len(out) >= 30
    return out[:40]


def _g711(x: F32, law: str = "ulaw", gain: float = 0.5, shift: int = 160) -> F32:
    y = np.concatenate([np.zeros(shift, np.float32), x]) * gain
    pcm = np.clip(y * 32768.0, -32768, 32767).astype(np.int16)
    enc, dec = (ulaw_encode, ulaw_decode) if law == "ulaw" else (alaw_encode, alaw_decode)
    return dec(enc(pcm)).astype(np.float32) / 32768.0


def test_same_audio_through_g711_and_a_20ms_shift_matches(utterances: list[F32]) -> None:
    rates = []
    for k, x in enumerate(utterances):
        law = "ulaw" if k % 2 else "alaw"
        a, b = fingerprint(x), fingerprint(_g711(x, law))
        rate, shift, frames = best_alignment(a, b, 3)
        assert frames >= 0.5 * a.valid_count
        assert shift in (1, 2)  # 20 ms = 1.25 hops later
        rates.append(rate)
    assert max(rates) < 0.15, rates
    assert float(np.median(rates)) < 0.08


def test_different_utterances_do_not_match(utterances: list[F32]) -> None:
    fps = [fingerprint(x) for x in utterances]
    worst = min(
        best_alignment(fps[i], fps[j], 40)[0]
        for i in range(len(fps))
        for j in range(i + 1, min(len(fps), i + 6))
    )
    assert worst > 0.3, worst


def test_index_finds_the_copy_and_nothing_else(utterances: list[F32]) -> None:
    index = FingerprintIndex()
    index.add([Clip(f"c{k}", fingerprint(x), f"call-{k}", 0.0) for k, x in enumerate(utterances)])
    found = 0
    for k, x in enumerate(utterances):
        matches = index.query(fingerprint(_g711(x, shift=160 + 37 * k % HOP)))
        assert all(m.clip.clip_id == f"c{k}" for m in matches)
        found += bool(matches)
        assert not index.query(fingerprint(x), exclude_owner=f"call-{k}")
    assert found == len(utterances)


def test_silence_is_never_a_match() -> None:
    quiet = np.zeros(3 * RATE, np.float32)
    fp = fingerprint(quiet)
    assert len(fp) > 0 and fp.valid_count == 0
    index = FingerprintIndex()
    index.add([Clip("q", fp, "call", 0.0)])
    assert len(index) == 0 and not index.query(fp)


def test_encodings_round_trip(utterances: list[F32]) -> None:
    fp = fingerprint(utterances[0])
    fp = Fingerprint(fp.bits, fp.valid.copy())
    fp.valid[::7] = False
    for back in (decode(encode(fp)), from_vector(to_vector(fp))):
        assert np.array_equal(back.valid, fp.valid)
        assert np.array_equal(back.bits[fp.valid], fp.bits[fp.valid])
    with pytest.raises(ValueError):
        decode("3.AAAA.AA")
