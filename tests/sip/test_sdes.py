"""SDES (RFC 4568 a=crypto) parsing, suite choice, offer/answer on RTP/SAVP(F), and the
UAS handing the remote's key to the leg (re-INVITE re-keys; the same key does not)."""

from __future__ import annotations

import base64

import pytest
from sip_fakes import harness, in_dialog, invite

from native.srtp import SrtpKey
from sip_bridge.sip.offer_answer import NotAcceptableError, build_answer, negotiate
from sip_bridge.sip.sdes import CryptoLine, choose
from sip_bridge.sip.sdp import SessionDescription

K30 = base64.b64encode(bytes(range(30))).decode()
K30B = base64.b64encode(bytes(range(100, 130))).decode()
K28 = base64.b64encode(bytes(range(28))).decode()


def _offer(proto: str, *crypto: str, port: int = 49170) -> str:
    lines = "".join(f"a=crypto:{c}\n" for c in crypto)
    return (
        "v=0\no=alice 1 1 IN IP4 192.0.2.10\ns=-\nc=IN IP4 192.0.2.10\nt=0 0\n"
        f"m=audio {port} {proto} 0 101\na=rtpmap:0 PCMU/8000\n"
        f"a=rtpmap:101 telephone-event/8000\n{lines}a=sendrecv\n"
    )


@pytest.mark.parametrize(
    ("value", "suite", "key_len", "mki"),
    [
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}", "AES_CM_128_HMAC_SHA1_80", 30, b""),
        (f"2 AES_CM_128_HMAC_SHA1_32 inline:{K30}|2^31", "AES_CM_128_HMAC_SHA1_32", 30, b""),
        (f"3 AEAD_AES_128_GCM inline:{K28}|2^20|1:4", "AEAD_AES_128_GCM", 28, b"\0\0\0\1"),
        (
            f"9 AES_CM_128_HMAC_SHA1_80 inline:{K30}|1066:2 WSH=128",
            "AES_CM_128_HMAC_SHA1_80",
            30,
            b"\x04\x2a",
        ),
    ],
)
def test_crypto_lines_parse(value: str, suite: str, key_len: int, mki: bytes) -> None:
    line = CryptoLine.parse(value)
    assert (line.suite, len(line.key_salt), line.mki, line.unusable()) == (suite, key_len, mki, "")
    assert K30 not in repr(line) and K28 not in repr(line)  # keys never reach a log


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1 AES_CM_128_HMAC_SHA1_80", "needs a tag, a suite and key parameters"),
        (f"x AES_CM_128_HMAC_SHA1_80 inline:{K30}", "bad a=crypto tag"),
        (f"1 AES_CM_128_HMAC_SHA1_80 uri:{K30}", "key method must be inline"),
        ("1 AES_CM_128_HMAC_SHA1_80 inline:***", "not base64"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}|2^99", "bad a=crypto lifetime"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}|1:0", "bad a=crypto MKI"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}|300:1", "does not fit its length"),
    ],
)
def test_malformed_crypto_lines_raise(value: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        CryptoLine.parse(value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}", "suite AES_256_CM_HMAC_SHA1_80 not supported"),
        (f"1 F8_128_HMAC_SHA1_80 inline:{K30}", "not supported"),
        (f"1 AEAD_AES_128_GCM inline:{K30}", "key is 30 bytes, not 28"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30};inline:{K30B}", "more than one key"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}|1:5", "MKI longer than 4 bytes"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30} UNENCRYPTED_SRTP", "UNENCRYPTED_SRTP"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30} UNAUTHENTICATED_SRTP", "not supported"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30} KDR=10", "KDR=10"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30} FEC_ORDER=FEC_SRTP", "FEC_ORDER"),
    ],
)
def test_lines_we_cannot_receive_with(value: str, why: str) -> None:
    assert why in CryptoLine.parse(value).unusable()


def test_best_supported_suite_wins_then_offer_order() -> None:
    line, _ = choose(
        [
            f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}",
            f"2 AES_CM_128_HMAC_SHA1_32 inline:{K30}",
            f"3 AES_CM_128_HMAC_SHA1_80 inline:{K30}",
            f"4 AES_CM_128_HMAC_SHA1_80 inline:{K30B}",
        ]
    )
    assert line is not None and (line.tag, line.suite) == (3, "AES_CM_128_HMAC_SHA1_80")
    line, _ = choose(
        [f"5 AES_CM_128_HMAC_SHA1_80 inline:{K30}", f"6 AEAD_AES_128_GCM inline:{K28}"]
    )
    assert line is not None and line.tag == 6
    assert choose(["bogus"])[0] is None and choose([]) == (None, "no a=crypto line")


@pytest.mark.parametrize("proto", ["RTP/SAVP", "RTP/SAVPF"])
def test_savp_offer_answered_with_our_own_key(proto: str) -> None:
    offer = SessionDescription.parse(
        _offer(proto, f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}", f"2 AEAD_AES_128_GCM inline:{K28}")
        .replace("\n", "\r\n")
        .encode()
    )
    (stream,) = negotiate(offer)
    assert stream.accepted and stream.srtp == SrtpKey("AEAD_AES_128_GCM", bytes(range(28)))
    answers = [
        build_answer(
            offer, [stream], {0: 30000}, local_host="198.51.100.1", session_id=1, version=1
        )
        for _ in range(2)
    ]
    values = []
    for answer in answers:
        m = answer.media[0]
        assert m.m_line == f"audio 30000 {proto} 0 101"
        (value,) = [v for n, v in m.attributes if n == "crypto"]
        mine = CryptoLine.parse(value or "")
        assert (mine.tag, mine.suite, len(mine.key_salt)) == (2, "AEAD_AES_128_GCM", 28)
        assert mine.key_salt != bytes(range(28))
        values.append(value)
    assert values[0] != values[1]  # fresh keys


def test_plain_avp_is_unchanged_even_with_crypto_lines() -> None:
    offer = SessionDescription.parse(
        _offer("RTP/AVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}").encode()
    )
    (stream,) = negotiate(offer)
    assert stream.accepted and stream.srtp is None
    answer = build_answer(offer, [stream], {0: 30000}, local_host="h", session_id=1, version=1)
    assert answer.media[0].attribute("crypto") is None


def test_unsupported_srtp_only_offer_is_not_acceptable() -> None:
    offer = SessionDescription.parse(
        _offer("RTP/SAVP", f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}").encode()
    )
    with pytest.raises(NotAcceptableError, match="no usable SRTP key: suite AES_256"):
        negotiate(offer)
    dtls = SessionDescription.parse(_offer("UDP/TLS/RTP/SAVP").encode())
    with pytest.raises(NotAcceptableError, match="codec"):
        negotiate(dtls)


def test_unusable_savp_line_rejected_beside_a_plain_one() -> None:
    text = _offer("RTP/SAVP", f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}") + (
        "m=audio 49172 RTP/AVP 0\na=rtpmap:0 PCMU/8000\n"
    )
    offer = SessionDescription.parse(text.encode())
    first, second = negotiate(offer)
    assert not first.accepted and "AES_256" in first.reject_reason and second.accepted
    answer = build_answer(
        offer, [first, second], {1: 30002}, local_host="h", session_id=1, version=1
    )
    assert [m.port for m in answer.media] == [0, 30002]


def test_uas_hands_the_key_to_the_leg_and_reinvite_rekeys() -> None:
    h = harness()
    first = _offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{K30}")
    (trying, ok) = h.send(invite(body=first))
    assert (trying.status, ok.status) == (100, 200)
    assert b"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:" in ok.body
    (leg_id,) = h.media.legs
    assert h.media.legs[leg_id]["srtp"] == SrtpKey("AES_CM_128_HMAC_SHA1_80", bytes(range(30)))
    tag = ok.headers.get("To").split("tag=")[1]
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack1"))
    same = first.replace("o=alice 1 1", "o=alice 1 2")
    (again,) = h.send(in_dialog("INVITE", tag, cseq=2, branch="z9hG4bKre1", body=same))
    assert again.status == 200 and ("rekey", leg_id) not in h.media.log
    h.send(in_dialog("ACK", tag, cseq=2, branch="z9hG4bKack2"))
    new = _offer("RTP/SAVP", f"7 AES_CM_128_HMAC_SHA1_32 inline:{K30B}")
    (rekeyed,) = h.send(in_dialog("INVITE", tag, cseq=3, branch="z9hG4bKre2", body=new))
    assert rekeyed.status == 200 and b"a=crypto:7 AES_CM_128_HMAC_SHA1_32 inline:" in rekeyed.body
    assert h.media.log.count(("rekey", leg_id)) == 1
    assert h.media.legs[leg_id]["srtp"] == SrtpKey(
        "AES_CM_128_HMAC_SHA1_32", bytes(range(100, 130))
    )


def test_uas_refuses_an_srtp_offer_it_cannot_key() -> None:
    h = harness()
    offer = _offer("RTP/SAVP", f"1 AES_256_CM_HMAC_SHA1_80 inline:{K30}")
    responses = h.send(invite(body=offer))
    assert responses[-1].status == 488 and h.media.legs == {} and h.controller.calls == {}
