"""telephone-event at an 8 kHz and a 48 kHz RTP clock (issue 12's codec matrix: WebRTC
and Opus trunks send RFC 4733 events on Opus's 48 kHz clock): the same digit lengths
come out in milliseconds, whatever the clock the durations are counted in."""

from __future__ import annotations

import pytest

from native.codec import build_rtp
from native.jitter import JitterBuffer, JitterConfig, PacketOutcome, PayloadType


@pytest.mark.parametrize("clock", [8000, 48000])
@pytest.mark.parametrize("ms", [40, 100, 250])
def test_dtmf_duration_in_ms_at_either_clock(clock: int, ms: int) -> None:
    audio = PayloadType(0, "PCMU") if clock == 8000 else PayloadType(111, "opus", 48000, 2)
    event_pt = PayloadType(101, "telephone-event", clock)
    jb = JitterBuffer(JitterConfig(payload_types=(audio, event_pt), dtmf_key=7))
    ticks = clock * ms // 1000
    step = clock // 50  # an update every 20 ms, then the end three times
    seq, ts = 100, 5 * clock
    for d in [*range(step, ticks, step), ticks, ticks, ticks]:
        end = 0x80 if d == ticks else 0
        payload = bytes([7, end | 10, d >> 8 & 0xFF, d & 0xFF])
        dg = build_rtp(payload, seq=seq, ts=ts, ssrc=9, payload_type=101)
        assert jb.insert(dg, seq * 10**6) == PacketOutcome.DTMF
        seq += 1
    (event,) = jb.take_dtmf()
    assert event.ended and event.duration_ms == ms
