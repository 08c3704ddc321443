"""G.711 against CPython's audioop (the Sun/CCITT reference code), exhaustively."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

from native import codec

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # stdlib until 3.13; the reference these tests compare against

Decode = Callable[[bytes], codec.Pcm16]
Encode = Callable[[codec.Pcm16], bytes]
RefCodec = Callable[[bytes, int], bytes]

ALL_CODES = bytes(range(256))
ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)

LAWS = [
    pytest.param(
        codec.ulaw_decode, codec.ulaw_encode, audioop.ulaw2lin, audioop.lin2ulaw, id="ulaw"
    ),
    pytest.param(
        codec.alaw_decode, codec.alaw_encode, audioop.alaw2lin, audioop.lin2alaw, id="alaw"
    ),
]


@pytest.mark.parametrize(("decode", "encode", "ref_decode", "ref_encode"), LAWS)
def test_decode_matches_audioop_for_all_codes(
    decode: Decode, encode: Encode, ref_decode: RefCodec, ref_encode: RefCodec
) -> None:
    expected = np.frombuffer(ref_decode(ALL_CODES, 2), dtype="<i2")
    got = decode(ALL_CODES)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("decode", "encode", "ref_decode", "ref_encode"), LAWS)
def test_encode_matches_audioop_for_every_int16(
    decode: Decode, encode: Encode, ref_decode: RefCodec, ref_encode: RefCodec
) -> None:
    expected = ref_encode(ALL_SAMPLES.astype("<i2").tobytes(), 2)
    got = encode(ALL_SAMPLES)
    assert len(got) == 65536
    mismatches = [i for i in range(65536) if got[i] != expected[i]]
    assert mismatches == [], f"first mismatch at sample {int(ALL_SAMPLES[mismatches[0]])}"


@pytest.mark.parametrize(
    ("code", "value"),
    [(0x00, -32124), (0x80, 32124), (0xFF, 0), (0x7F, 0), (0xFE, 8), (0x7E, -8)],
)
def test_ulaw_known_points(code: int, value: int) -> None:
    assert int(codec.ulaw_decode(bytes([code]))[0]) == value


@pytest.mark.parametrize(
    ("code", "value"),
    [(0xD5, 8), (0x55, -8), (0xAA, 32256), (0x2A, -32256), (0xD4, 24), (0x80, 5504)],
)
def test_alaw_known_points(code: int, value: int) -> None:
    assert int(codec.alaw_decode(bytes([code]))[0]) == value


def test_ulaw_round_trip_returns_every_code_but_negative_zero() -> None:
    back = codec.ulaw_encode(codec.ulaw_decode(ALL_CODES))
    diff = {c: back[c] for c in range(256) if back[c] != c}
    assert diff == {0x7F: 0xFF}  # -0 and +0 both decode to 0, which encodes as +0


def test_alaw_round_trip_returns_every_code() -> None:
    assert codec.alaw_encode(codec.alaw_decode(ALL_CODES)) == ALL_CODES


@pytest.mark.parametrize(("decode", "encode", "ref_decode", "ref_encode"), LAWS)
def test_encode_decode_is_idempotent_and_monotonic(
    decode: Decode, encode: Encode, ref_decode: RefCodec, ref_encode: RefCodec
) -> None:
    once = decode(encode(ALL_SAMPLES))
    twice = decode(encode(once))
    np.testing.assert_array_equal(once, twice)
    # quantisation keeps order: a larger input never maps to a smaller level
    assert bool(np.all(np.diff(once.astype(np.int32)) >= 0))


@pytest.mark.parametrize(
    ("decode", "encode", "max_err", "fine_err"),
    [
        # µ-law: top step 1024 -> 512, plus the 2 bits dropped for 14-bit input (515);
        # clipping at -32768 against the largest level 32124 gives 644.
        pytest.param(codec.ulaw_decode, codec.ulaw_encode, 644, 7, id="ulaw"),
        # A-law: top step 1024 -> 512, largest level 32256 -> clipping also 512.
        pytest.param(codec.alaw_decode, codec.alaw_encode, 512, 8, id="alaw"),
    ],
)
def test_quantisation_error_is_bounded(
    decode: Decode, encode: Encode, max_err: int, fine_err: int
) -> None:
    err = np.abs(decode(encode(ALL_SAMPLES)).astype(np.int32) - ALL_SAMPLES.astype(np.int32))
    assert int(err.max()) == max_err
    small = np.abs(ALL_SAMPLES.astype(np.int32)) < 32
    assert int(err[small].max()) == fine_err  # finest steps near zero: 8 and 16 apart


def test_batches_accept_bytes_like_and_empty() -> None:
    assert codec.ulaw_decode(b"").shape == (0,)
    assert codec.alaw_encode(np.zeros(0, dtype=np.int16)) == b""
    data = bytearray(b"\x01\x02\x03")
    np.testing.assert_array_equal(
        codec.ulaw_decode(memoryview(data)), codec.ulaw_decode(bytes(data))
    )


def test_encode_accepts_strided_views() -> None:
    samples = ALL_SAMPLES[::7]
    assert codec.ulaw_encode(samples) == codec.ulaw_encode(samples.copy())


def test_encode_rejects_wrong_dtype_and_shape() -> None:
    with pytest.raises(TypeError, match="int16"):
        codec.ulaw_encode(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="1-D"):
        codec.alaw_encode(np.zeros((2, 2), dtype=np.int16))
