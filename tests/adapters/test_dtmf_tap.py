"""The bridge's DTMF tap on real pushed ingest streams (issue 6): µ-law audio and RFC 4733
events go through the C jitter buffer and tracker, the playout pull feeds the tap on a
virtual 20 ms clock. One leg carries a PIN in-band only, one as RFC 4733 only, one both
ways, with the events arriving after the tones (a slow SBC), or with keys held down for
1.5 s: every key is counted once per leg; a dropped leg frees its slot and forgets its
call."""

from __future__ import annotations

import struct

import numpy as np

from detectors.dtmf.behaviour import Features
from detectors.dtmf.goertzel import COLS, KEYS, ROWS
from native.codec import ulaw_encode
from native.ingest import Ingest
from sip_bridge.dtmf_tap import DtmfTap, DtmfTapStats

FRAME = 160
TICK = 20_000_000
PIN = "2580"


def _tone(key: str, n: int) -> np.ndarray:
    i = KEYS.index(key)
    t = np.arange(n) / 8000
    a = 32768 * 10 ** (-12 / 20)
    return a * (np.sin(2 * np.pi * ROWS[i // 4] * t) + np.sin(2 * np.pi * COLS[i % 4] * t))


def _event(key: str, duration: int, end: bool) -> bytes:
    return struct.pack("!BBH", int(key), (0x80 if end else 0) | 10, duration)


def _run(key_slots: int, late_slots: int) -> tuple[DtmfTapStats, dict[str, Features]]:
    """The PIN on three legs (in-band, RFC 4733, both), keys ``key_slots`` x 20 ms long
    and 200 ms apart, from 0.5 s on; on the "both" leg the events arrive ``late_slots``
    x 20 ms after the tone's first frame. Returns the tap's counts and each leg's
    features once its entry closed, then checks the hang-up."""
    keys = [(25 + (key_slots + 10) * n, key) for n, key in enumerate(PIN)]
    audio = np.zeros((keys[-1][0] + key_slots + 25) * FRAME)
    for slot, key in keys:
        audio[slot * FRAME : (slot + key_slots) * FRAME] = _tone(key, key_slots * FRAME)
    ulaw = ulaw_encode(np.clip(audio, -32768, 32767).astype(np.int16))
    frames = len(ulaw) // FRAME
    with Ingest(max_streams=8) as ingest:
        legs = {mode: ingest.add_stream_push() for mode in ("inband", "rfc", "both")}
        tap = DtmfTap(ingest, max_legs=4)
        t0 = 10**9
        tap.sync({sid: ("call-" + mode, mode) for mode, sid in legs.items()}, t0)
        results = []
        for k in range(frames + 150):  # then 3 s more: entries close
            now = t0 + k * TICK
            for mode, sid in legs.items():
                if k < frames:
                    silent = mode == "rfc"  # no tones in its audio
                    payload = b"\xff" * FRAME if silent else ulaw[k * FRAME : (k + 1) * FRAME]
                    ingest.push_payload(sid, 0, k, k * FRAME, 0x1234, payload, now)
                for slot, key in keys:
                    at = slot + (late_slots if mode == "both" else 0)
                    if mode != "inband" and at <= k < at + key_slots:
                        i = k - at
                        last = i == key_slots - 1
                        for _ in range(3 if last else 1):
                            ev = _event(key, (i + 1) * FRAME, last)
                            ingest.push_event(sid, ev, slot * FRAME, now)
            results += tap.push(now, ingest.pull_all(now))
        assert sorted({r.key.leg_id for r in results}) == ["both", "inband", "rfc"]
        features = {mode: tap._legs[sid].call.features() for mode, sid in legs.items()}
        # the hang-up: slots come back, the calls are wiped
        calls = [leg.call for leg in tap._legs.values()]
        tap.sync({}, t0)
        assert not tap._legs and len(tap._free) == 4
        assert all(c.features().entries == 0 for c in calls)
        return tap.stats, features


def test_inband_rfc4733_and_both_are_counted_once_per_leg() -> None:
    # 100 ms keys; the "both" leg's events 200 ms behind its tones (a slow SBC)
    st, features = _run(key_slots=5, late_slots=10)
    assert (st.rfc_events, st.inband_keys, st.inband_deduplicated) == (8, 8, 4), st
    for mode, f in features.items():
        assert f.entries == 1 and f.intervals == 3, (mode, f)  # 4 keys, not 8


def test_a_key_held_down_is_still_counted_once() -> None:
    # 1.5 s key presses: the event reaches the tracker at its end, long after the tone's
    # start; the in-band key waits for its own end
    st, features = _run(key_slots=75, late_slots=0)
    assert (st.rfc_events, st.inband_keys, st.inband_deduplicated) == (8, 8, 4), st
    for mode, f in features.items():
        assert f.entries == 1 and f.intervals == 3, (mode, f)
