"""SRTP legs of the native ingest: real speech protected by libsrtp (pylibsrtp, an
independent implementation) sent over real UDP, authenticated and decrypted in the C
receiver before parsing, and pulled bit-exactly; tampered, replayed, foreign-key and SRTCP
datagrams are counted and dropped; the standalone context interoperates with libsrtp in
both directions, across the ROC wrap, for every suite."""

from __future__ import annotations

import os
import struct

import numpy as np
import numpy.typing as npt
import pylibsrtp
import pytest
from rtp_call import FRAME, Leg, assert_exact, run_realtime, wait_until

from native.ingest import Ingest
from native.srtp import SrtpContext, key_length

PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
    "AEAD_AES_128_GCM": pylibsrtp.Policy.SRTP_PROFILE_AEAD_AES_128_GCM,
}


def _libsrtp(suite: str, key: bytes, outbound: bool) -> pylibsrtp.Session:
    ssrc_type = (
        pylibsrtp.Policy.SSRC_ANY_OUTBOUND if outbound else pylibsrtp.Policy.SSRC_ANY_INBOUND
    )
    return pylibsrtp.Session(
        policy=pylibsrtp.Policy(key=key, ssrc_type=ssrc_type, srtp_profile=PROFILES[suite])
    )


@pytest.mark.parametrize("suite", sorted(PROFILES))
def test_context_interoperates_with_libsrtp(suite: str) -> None:
    key = os.urandom(key_length(suite))
    to_us, from_us = _libsrtp(suite, key, True), _libsrtp(suite, key, False)
    ours = SrtpContext(suite, key)
    roc = 0
    for seq in [*range(65530, 65536), *range(0, 6)]:
        roc += seq == 0
        plain = struct.pack("!BBHII", 0x80, 8, seq, seq * 160, 0xFEED) + os.urandom(160)
        wire = to_us.protect(plain)
        assert ours.unprotect(wire) == ("ok", plain)
        sender = SrtpContext(suite, key)
        assert from_us.unprotect(sender.protect(plain, roc)) == plain
    assert ours.unprotect(wire)[0] == "replay"


def _srtp_call(
    speech: npt.NDArray[np.int16], suite: str, mutate: bool
) -> tuple[dict[int, npt.NDArray[np.int16]], dict[str, object], dict[str, object], Leg]:
    """One leg of SRTP speech; with ``mutate`` also a tampered copy of packet 10 (before
    the real one), a replay of packet 20, packet 21 under a foreign key and an SRTCP
    report. Returns the NORMAL frames by offset, stream and global counters, the leg."""
    leg = Leg(speech[: 60 * FRAME], ssrc=0x5A17, seq0=65500)  # crosses the ROC wrap
    key = os.urandom(key_length(suite))
    sender, stranger = _libsrtp(suite, key, True), _libsrtp(suite, os.urandom(len(key)), True)
    protected = [sender.protect(leg.packet(k)) for k in range(leg.packets)]
    srtcp = sender.protect_rtcp(struct.pack("!BBHI", 0x80, 201, 1, 0x5A17))
    with Ingest(4) as ing:
        sid = ing.add_stream(0)
        assert ing.set_srtp(sid, suite, key) is True
        assert ing.set_srtp(sid, suite, key) is False  # a repeated a=crypto keeps the ROC
        dest = ing.local_address(sid)

        def tick(k: int) -> None:
            if mutate and k == 10:
                bad = bytearray(protected[k])
                bad[20] ^= 0x04
                leg.sock.sendto(bytes(bad), dest)
            if k < leg.packets:
                leg.sock.sendto(protected[k], dest)
            if mutate and k == 20:
                leg.sock.sendto(protected[20], dest)
                leg.sock.sendto(stranger.protect(leg.packet(k + 1)), dest)
                leg.sock.sendto(srtcp, dest)

        frames = run_realtime(ing, leg.packets + 12, tick)[sid]
        extra = 4 if mutate else 0
        wait_until(lambda: ing.stream_counters(sid)["datagrams"] == leg.packets + extra)
        counters, totals = ing.stream_counters(sid), ing.counters()
    normal = assert_exact(frames, leg, min_frames=leg.packets - 6)
    return normal, counters, totals, leg


@pytest.mark.parametrize("suite", sorted(PROFILES))
def test_srtp_leg_decodes_bit_exactly(speech: npt.NDArray[np.int16], suite: str) -> None:
    normal, c, _, leg = _srtp_call(speech, suite, mutate=False)
    assert len(normal) >= leg.packets - 6  # each one bit-exact at its RTP timestamp
    assert c["srtp_suite"] > 0 and c["srtp_ok"] == leg.packets
    assert c["srtp_auth_failed"] == c["srtp_replayed"] == c["srtp_malformed"] == 0
    assert c["inserted"] == leg.packets - 1  # the first is the source lock's probation


def test_tampered_replayed_foreign_and_srtcp_are_dropped(speech: npt.NDArray[np.int16]) -> None:
    clean, _, _, _ = _srtp_call(speech, "AES_CM_128_HMAC_SHA1_80", mutate=False)
    normal, c, g, leg = _srtp_call(speech, "AES_CM_128_HMAC_SHA1_80", mutate=True)
    assert (c["srtp_auth_failed"], c["srtp_replayed"], c["srtcp_ignored"]) == (2, 1, 1)
    assert (g["srtp_auth_failed"], g["srtp_replayed"], g["srtcp_ignored"]) == (2, 1, 1)
    assert c["srtp_ok"] == leg.packets and c["inserted"] == leg.packets - 1
    assert c["outcomes"][2:] == [0] * 12  # no duplicate, late, ... reached the buffer
    for off in set(normal) & set(clean):  # the attack changed no sample
        np.testing.assert_array_equal(normal[off], clean[off])


def test_plain_rtp_on_an_srtp_leg_is_refused(speech: npt.NDArray[np.int16]) -> None:
    leg = Leg(speech[: 20 * FRAME], ssrc=7)
    with Ingest(4) as ing:
        sid = ing.add_stream(0)
        ing.set_srtp(sid, "AEAD_AES_128_GCM", os.urandom(28))
        dest = ing.local_address(sid)
        for k in range(leg.packets):
            leg.send(k, dest)
        wait_until(lambda: ing.stream_counters(sid)["datagrams"] == leg.packets)
        c = ing.stream_counters(sid)
        assert (c["srtp_auth_failed"], c["inserted"]) == (leg.packets, 0)
        with pytest.raises(ValueError, match="bad SRTP key"):
            ing.set_srtp(sid, "AEAD_AES_128_GCM", os.urandom(30))
        with pytest.raises(ValueError, match="unsupported SRTP suite"):
            ing.set_srtp(sid, "F8_128_HMAC_SHA1_80", os.urandom(30))
        assert ing.set_srtp(sid, None) is False
        assert ing.stream_counters(sid)["srtp_suite"] == 0
