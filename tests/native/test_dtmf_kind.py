"""The RFC 4733 tracker says what kind of key an event was (digit, ``*``/``#``
navigation, other) without the key itself: dtmf_behaviour counts menu navigation from
it (issue 6). Tokens stay a keyed permutation: the same key compares equal within a
call, and another call's key maps elsewhere."""

from __future__ import annotations

from native.codec import build_rtp
from native.jitter import DtmfEvent, JitterBuffer, JitterConfig, PacketOutcome, PayloadType


def _events(codes: list[int], key: int) -> list[DtmfEvent]:
    pts = (PayloadType(0, "PCMU"), PayloadType(101, "telephone-event", 8000))
    jb = JitterBuffer(JitterConfig(payload_types=pts, dtmf_key=key))
    seq, ts = 10, 8000
    for code in codes:
        for _ in range(3):  # the end packet, three times
            dg = build_rtp(
                bytes([code, 0x80 | 10, 0, 160]), seq=seq, ts=ts, ssrc=5, payload_type=101
            )
            assert jb.insert(dg, seq * 10**6) == PacketOutcome.DTMF
            seq += 1
        ts += 1600
    return jb.take_dtmf()


def test_kind_of_each_event_code() -> None:
    codes = [0, 5, 9, 10, 11, 12, 15, 16]  # digits, *, #, A, D, flash
    events = _events(codes, key=3)
    assert [e.kind for e in events] == [0, 0, 0, 1, 1, 2, 2, 2]
    assert len({e.token for e in events}) == len(codes)  # a permutation: all distinct


def test_tokens_compare_within_a_call_only() -> None:
    a = _events([4, 4, 7], key=1)
    assert a[0].token == a[1].token != a[2].token
    # over several call keys the same digit does not always map to the same token
    assert len({_events([4], key=k)[0].token for k in range(2, 12)}) > 1
