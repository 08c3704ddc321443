"""An SDES-SRTP leg whose peer changes SSRC under the same key (a transfer or
re-origination on the same 5-tuple, no re-INVITE): the index, ROC and replay window are
per SSRC (RFC 3711 3.2.3), so the new SSRC's audio decodes bit-exactly where it used to
fail (auth at B's seq 1000, replay at 30000, after A reached 40009). Real UDP on
127.0.0.1, speech protected by libsrtp (pylibsrtp, an independent implementation). A
key holds at most four SSRCs: an authentic fifth is counted (srtp_ssrc_limit) and
dropped, and a new key makes room again."""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt
import pylibsrtp
import pytest
from rtp_call import (
    FRAME,
    Leg,
    assert_exact,
    frames_sent_by,
    run_realtime,
    source_of,
    wait_until,
)

from native import lib
from native.ingest import Ingest
from native.srtp import key_length

PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AEAD_AES_128_GCM": pylibsrtp.Policy.SRTP_PROFILE_AEAD_AES_128_GCM,
}
GAP = 5  # ticks of silence between SSRCs: 100 ms, past the 80 ms quiet time


def _sender(suite: str, key: bytes) -> pylibsrtp.Session:
    """libsrtp's sending side; it keeps a ROC per SSRC, each starting at 0."""
    policy = pylibsrtp.Policy(
        key=key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=PROFILES[suite]
    )
    return pylibsrtp.Session(policy=policy)


@pytest.mark.parametrize(
    ("suite", "seq_b"), [("AES_CM_128_HMAC_SHA1_80", 1000), ("AEAD_AES_128_GCM", 30000)]
)
def test_shared_srtp_leg_follows_an_ssrc_change_under_its_key(
    ingest: Ingest, speech: npt.NDArray[np.int16], suite: str, seq_b: int
) -> None:
    a = Leg(speech[: 30 * FRAME], ssrc=0xA11CE, seq0=39980)  # up to seq 40009
    b = Leg(speech[40 * FRAME : 85 * FRAME], 0xB0B, seq0=seq_b, ts0=7_000_000, sock=a.sock)
    key = os.urandom(key_length(suite))
    sender = _sender(suite, key)
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    sid = ingest.add_stream_shared(kid, expected_source=source_of(a.sock), ssrc=a.ssrc)
    assert ingest.set_srtp(sid, suite, key) is True

    def tick(k: int) -> None:
        if k < a.packets:
            a.sock.sendto(sender.protect(a.packet(k)), dest)
        elif 0 <= k - a.packets - GAP < b.packets:
            b.sock.sendto(sender.protect(b.packet(k - a.packets - GAP)), dest)

    frames = run_realtime(ingest, a.packets + GAP + b.packets + 10, tick)[sid]
    wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == a.packets + b.packets)
    c, g = ingest.stream_counters(sid), ingest.counters()
    assert (c["srtp_ok"], c["locked_ssrc"], g["demux_ssrc_follows"]) == (
        a.packets + b.packets,
        b.ssrc,
        1,
    )
    fails = ("srtp_auth_failed", "srtp_replayed", "srtp_malformed", "srtp_ssrc_limit")
    assert [c[f] for f in fails] == [0, 0, 0, 0]
    assert_exact(frames_sent_by(frames, a), a, min_frames=a.packets - 5)
    assert_exact(frames_sent_by(frames, b), b, min_frames=b.packets - 5)


def test_a_fifth_ssrc_under_one_key_is_counted_and_a_new_key_makes_room(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """Dedicated port: four SSRCs in turn from one source decode; the fifth, authentic
    under the same key, is dropped as srtp_ssrc_limit (slots are never evicted); after a
    re-INVITE's new key the same fifth SSRC decodes."""
    suite, n = "AES_CM_128_HMAC_SHA1_80", 10
    ssrcs = [0x100, 0x101, 0x102, 0x103, 0x104, 0x104]  # the fifth again, under a new key
    first = Leg(speech[: n * FRAME], ssrcs[0], seq0=65530)  # wraps to ROC 1
    legs = [first] + [
        Leg(speech[i * n * FRAME : (i + 1) * n * FRAME], ssrcs[i], 1000 * i, 10**6 * i, first.sock)
        for i in range(1, 6)
    ]
    keys = [os.urandom(key_length(suite)) for _ in range(2)]
    senders = [_sender(suite, k) for k in keys]
    sid = ingest.add_stream(0, expected_source=source_of(first.sock))
    dest = ingest.local_address(sid)
    assert ingest.set_srtp(sid, suite, keys[0]) is True
    period = n + GAP

    def tick(k: int) -> None:
        i, j = divmod(k, period)
        if i == 5 and j == 0:
            assert ingest.set_srtp(sid, suite, keys[1]) is True  # re-INVITE: new key
        if i < len(legs) and j < n:
            legs[i].sock.sendto(senders[i // 5].protect(legs[i].packet(j)), dest)

    frames = run_realtime(ingest, period * len(legs) + 10, tick)[sid]
    wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == n * len(legs))
    c, g = ingest.stream_counters(sid), ingest.counters()
    assert (c["srtp_ok"], c["srtp_ssrc_limit"], g["srtp_ssrc_limit"]) == (5 * n, n, n)
    assert (c["srtp_auth_failed"], c["srtp_replayed"], c["srtp_rekeys"]) == (0, 0, 1)
    assert c["locked_ssrc"] == legs[5].ssrc
    for i in (0, 1, 2, 3, 5):
        assert_exact(frames_sent_by(frames, legs[i]), legs[i], min_frames=n - 4)
    refused = frames_sent_by(frames, legs[4])
    assert not [f for f in refused if f.flag == lib.CS_FRAME_NORMAL]
