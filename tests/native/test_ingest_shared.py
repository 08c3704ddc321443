"""Shared-port ingest: many legs on one UDP socket on 127.0.0.1, told apart in C by
source address and SSRC, checked bit-exactly against the µ-law that was sent."""

from __future__ import annotations

import errno
import socket
import time

import numpy as np
import numpy.typing as npt
import pytest
from rtp_call import (
    FRAME,
    Leg,
    assert_exact,
    flags_between_first_and_last_normal,
    rtp_packet,
    run_realtime,
    wait_until,
)

from native import lib
from native.ingest import Ingest, IngestError

NORMAL = lib.CS_FRAME_NORMAL


def _leg(
    speech: npt.NDArray[np.int16], index: int, packets: int, sock: socket.socket | None = None
) -> Leg:
    start = index * 7 * FRAME
    audio = speech[start : start + packets * FRAME]
    ssrc, ts0 = 0x5A000000 + index, index * 1234
    return Leg(audio, ssrc=ssrc, ts0=ts0) if sock is None else Leg(audio, ssrc, sock=sock, ts0=ts0)


def _source(leg: Leg) -> tuple[str, int]:
    host, port = leg.sock.getsockname()[:2]
    return str(host), int(port)


@pytest.mark.parametrize("paced", [False, True], ids=["unpaced", "paced"])
def test_legs_from_distinct_ports_arrive_intact(paced: bool, speech: npt.NDArray[np.int16]) -> None:
    """Paced: the receiver sleeps 2 ms after every wakeup (coalesce_min 0: always), so
    datagrams of many legs queue up and come out of one recvmmsg."""
    with Ingest(64, coalesce_us=2000 if paced else 0, coalesce_min=0) as ingest:
        _legs_from_distinct_ports(ingest, speech, paced)


def _legs_from_distinct_ports(ingest: Ingest, speech: npt.NDArray[np.int16], paced: bool) -> None:
    legs = [_leg(speech, i, 60) for i in range(8)]
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    ids = [ingest.add_stream_shared(kid, expected_source=_source(leg)) for leg in legs]
    assert all(ingest.local_address(sid) == dest for sid in ids)

    frames = run_realtime(ingest, 60, lambda k: [leg.send(k, dest) for leg in legs])
    wait_until(lambda: ingest.counters()["datagrams"] == 8 * 60)

    for sid, leg in zip(ids, legs, strict=True):
        assert_exact(frames[sid], leg, min_frames=50)
        assert set(flags_between_first_and_last_normal(frames[sid])) == {NORMAL}
        c = ingest.stream_counters(sid)
        assert (c["datagrams"], c["inserted"]) == (60, 59)  # one probation packet
        assert c["locked_addr"] == _source(leg)
    sc = ingest.socket_counters(kid)
    assert (sc["datagrams"], sc["unmatched"], sc["legs"]) == (8 * 60, 0, 8)
    g = ingest.counters()
    assert (g["unmatched"], g["no_timestamp"]) == (0, 0)
    assert ingest.latency().count == 8 * 59
    assert (g["paced_sleeps"] > 0) == paced


def test_paced_receiver_reads_on_while_a_socket_has_a_backlog(
    speech: npt.NDArray[np.int16],
) -> None:
    """Pacing (here 50 ms per wakeup, one datagram per wakeup at most) must not cap the
    receive rate: after a full batch the receiver reads on instead of sleeping."""
    leg = _leg(speech, 13, 300)
    with Ingest(4, coalesce_us=50_000, coalesce_min=0, batch=1, max_batches=1) as ingest:
        kid = ingest.add_socket(0)
        ingest.add_stream_shared(kid, expected_source=_source(leg))
        dest = ingest.socket_address(kid)
        for k in range(300):  # a burst: far more than one datagram per 50 ms
            leg.send(k, dest)
        wait_until(lambda: ingest.counters()["datagrams"] == 300)
        g = ingest.counters()
    assert g["datagrams"] == 300
    assert g["paced_sleeps"] < 300


def test_legs_sharing_one_source_are_told_apart_by_ssrc(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """One sender port carrying three legs (an SRC forking both sides from one port),
    plus a leg that learns its source from its SSRC alone."""
    shared_sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    shared_sender.bind(("127.0.0.1", 0))
    legs = [_leg(speech, i, 60, shared_sender) for i in range(3)] + [_leg(speech, 3, 60)]
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    ids = [
        ingest.add_stream_shared(kid, expected_source=_source(leg), ssrc=leg.ssrc)
        for leg in legs[:3]
    ] + [ingest.add_stream_shared(kid, ssrc=legs[3].ssrc)]

    frames = run_realtime(ingest, 60, lambda k: [leg.send(k, dest) for leg in legs])
    wait_until(lambda: ingest.counters()["datagrams"] == 4 * 60)

    for sid, leg in zip(ids, legs, strict=True):
        assert_exact(frames[sid], leg, min_frames=50)
        c = ingest.stream_counters(sid)
        assert (c["datagrams"], c["inserted"], c["locked_ssrc"]) == (60, 59, leg.ssrc)
    assert ingest.stream_counters(ids[3])["locked_addr"] == _source(legs[3])
    assert ingest.counters()["unmatched"] == 0
    shared_sender.close()


def _shared_call_with_attacker(
    speech: npt.NDArray[np.int16], attack: bool
) -> tuple[list[dict[int, npt.NDArray[np.int16]]], dict[str, int], list[dict[str, object]], int]:
    """Two legs on one shared port, one expected by address, one learning by SSRC; the
    attacker (another port) sends each leg's SSRC in-window at 1,000 pps, and datagrams
    with an SSRC nobody uses."""
    legs = [_leg(speech, 4, 70), _leg(speech, 5, 70)]
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    sent = 0
    with Ingest(4) as ing:
        kid = ing.add_socket(0)
        dest = ing.socket_address(kid)
        ids = [
            ing.add_stream_shared(kid, expected_source=_source(legs[0])),
            ing.add_stream_shared(kid, ssrc=legs[1].ssrc),
        ]

        def tick(k: int) -> None:
            nonlocal sent
            for leg in legs:
                leg.send(k, dest)
            if attack and k >= 10:  # the SSRC leg has locked by now
                for j in range(20):
                    leg = legs[j % 2]
                    ahead = k + 1 + j % 5
                    ssrc = leg.ssrc if j % 4 else 0xBAD
                    payload = b"\x00" * FRAME
                    pkt = rtp_packet(leg.seq0 + ahead, leg.ts0 + ahead * FRAME, ssrc, payload)
                    attacker.sendto(pkt, dest)
                    sent += 1

        frames = run_realtime(ing, 70, tick)
        wait_until(lambda: ing.counters()["datagrams"] == 2 * 70 + sent)
        normal = []
        for sid, leg in zip(ids, legs, strict=True):
            normal.append(assert_exact(frames[sid], leg, min_frames=55))
            assert set(flags_between_first_and_last_normal(frames[sid])) == {NORMAL}
        result = normal, ing.socket_counters(kid), [ing.stream_counters(s) for s in ids], sent
    attacker.close()
    return result


def test_foreign_source_and_spoofed_ssrc_are_dropped(speech: npt.NDArray[np.int16]) -> None:
    """RTP Bleed on a shared port: the attacker's datagrams match no leg (not even the
    one that learned its source by SSRC) and the audio is bit-identical to a clean run."""
    clean, clean_sock, _, _ = _shared_call_with_attacker(speech, attack=False)
    attacked, sock, counters, spoofed = _shared_call_with_attacker(speech, attack=True)
    assert spoofed == 20 * 60
    assert clean_sock["unmatched"] == 0
    assert sock["unmatched"] == spoofed
    assert sock["datagrams"] == 2 * 70 + spoofed
    for c in counters:
        assert (c["datagrams"], c["inserted"]) == (70, 69)
    for got, want in zip(attacked, clean, strict=True):
        common = sorted(set(got) & set(want))
        assert len(common) >= 55
        for off in common:
            np.testing.assert_array_equal(got[off], want[off])


def test_legs_added_and_removed_while_traffic_flows(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    legs = [_leg(speech, i, 70) for i in range(6, 11)]
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    ids: list[int | None] = [
        ingest.add_stream_shared(kid, expected_source=_source(leg)) for leg in legs[:4]
    ] + [None]
    removed = ids[1]
    assert removed is not None

    def tick(k: int) -> None:
        if k == 25:
            ingest.remove_stream(removed)
        if k == 30:
            ids[4] = ingest.add_stream_shared(kid, ssrc=legs[4].ssrc)
        for i, leg in enumerate(legs):
            if i < 4 or k >= 30:  # the removed leg's source keeps sending
                leg.send(k - 30 if i == 4 else k, dest)

    frames = run_realtime(ingest, 70, tick)
    wait_until(lambda: ingest.counters()["datagrams"] == 4 * 70 + 40)
    for i in (0, 2, 3):
        sid = ids[i]
        assert sid is not None
        assert_exact(frames[sid], legs[i], min_frames=58)
        assert set(flags_between_first_and_last_normal(frames[sid])) == {NORMAL}
    new = ids[4]
    assert new is not None and new != removed
    assert_exact(frames[new], legs[4], min_frames=28)
    assert len(frames[removed]) == 25
    with pytest.raises(IngestError) as err:
        ingest.stream_counters(removed)
    assert err.value.errno == errno.ENOENT
    removed_got = 70 - ingest.socket_counters(kid)["unmatched"]
    assert 20 <= removed_got <= 30  # the removed leg's datagrams until its removal
    with pytest.raises(IngestError) as err:
        ingest.remove_socket(kid)
    assert err.value.errno == errno.EBUSY
    for sid in ids:
        assert sid is not None
        if sid != removed:
            ingest.remove_stream(sid)
    ingest.remove_socket(kid)
    with pytest.raises(IngestError) as err:
        ingest.socket_counters(kid)
    assert err.value.errno == errno.ENOENT


def test_unmatched_and_malformed_datagrams_are_counted(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    leg = _leg(speech, 11, 40)
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    sid = ingest.add_stream_shared(kid, expected_source=_source(leg))
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def tick(k: int) -> None:
        leg.send(k, dest)
        stranger.sendto(rtp_packet(k, k * FRAME, 0x77, b"\xff" * FRAME), dest)
        stranger.sendto(b"\x80\x00\x01", dest)  # too short for RTP

    frames = run_realtime(ingest, 40, tick)
    stranger.close()
    wait_until(lambda: ingest.counters()["datagrams"] == 3 * 40)
    assert_exact(frames[sid], leg, min_frames=30)
    sc = ingest.socket_counters(kid)
    assert (sc["datagrams"], sc["unmatched"], sc["parse_errors"]["short"]) == (120, 40, 40)
    g = ingest.counters()
    assert (g["unmatched"], g["parse_errors"]["short"]) == (40, 40)
    c = ingest.stream_counters(sid)
    assert (c["datagrams"], sum(c["parse_errors"].values())) == (40, 0)


def test_ssrc_leg_follows_its_media_to_a_new_port_after_rearm(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """Re-INVITE on a shared port: the same SSRC moves to a new source port. Before the
    rearm the new port is unmatched; after it the leg relearns by SSRC and locks on."""
    old = _leg(speech, 12, 70)
    new = Leg(old.source, ssrc=old.ssrc, ts0=old.ts0)  # same stream, new sender port
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    sid = ingest.add_stream_shared(kid, ssrc=old.ssrc)

    def tick(k: int) -> None:
        if k == 35:
            ingest.rearm(sid, time.monotonic_ns())
        (old if k < 30 else new).send(k, dest)

    frames = run_realtime(ingest, 70, tick)[sid]
    wait_until(lambda: ingest.counters()["datagrams"] == 70)
    c = ingest.stream_counters(sid)
    assert c["locked_addr"] == _source(new)
    assert (c["srclock"]["rearms"], c["srclock"]["learned"]) == (1, 2)
    assert ingest.socket_counters(kid)["unmatched"] == 5  # k = 30..34, before the rearm
    assert_exact(frames, old, min_frames=50)


def test_shared_leg_errors(ingest: Ingest) -> None:
    kid = ingest.add_socket(0)
    with pytest.raises(IngestError) as err:
        ingest.add_stream_shared(kid)  # neither a source address nor an SSRC
    assert err.value.errno == errno.EINVAL
    with pytest.raises(IngestError) as err:
        ingest.add_stream_shared(kid, expected_source=("127.0.0.1", 0))  # no port, no SSRC
    assert err.value.errno == errno.EINVAL
    sid = ingest.add_stream_shared(kid, expected_source=("127.0.0.1", 4000))
    with pytest.raises(IngestError) as err:
        ingest.add_stream_shared(kid, expected_source=("127.0.0.1", 4000))
    assert err.value.errno == errno.EEXIST
    ingest.add_stream_shared(kid, expected_source=("127.0.0.1", 4000), ssrc=9)  # tie-break
    ingest.add_stream_shared(kid, ssrc=9)  # learning by SSRC 9: a different key
    with pytest.raises(IngestError) as err:
        ingest.add_stream_shared(kid, ssrc=9)
    assert err.value.errno == errno.EEXIST
    with pytest.raises(IngestError) as err:
        ingest.add_stream_shared(kid + 1, ssrc=10)
    assert err.value.errno == errno.ENOENT
    other = ingest.add_socket(0)
    ingest.add_stream_shared(other, expected_source=("127.0.0.1", 4000))  # other socket
    with pytest.raises(IngestError) as err:
        ingest.expect_source(sid, "127.0.0.1", 0)  # would leave the leg unreachable
    assert err.value.errno == errno.EINVAL
    ingest.expect_source(sid, "127.0.0.1", 4001)
    ingest.add_stream_shared(kid, expected_source=("127.0.0.1", 4000))  # freed by the move
