"""RTP ingest end to end: real UDP senders on 127.0.0.1 -> C receiver thread -> jitter
buffers -> batch pull, checked bit-exactly against the µ-law that was sent."""

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

from native import ffi, lib
from native.ingest import Ingest, IngestError

NORMAL = lib.CS_FRAME_NORMAL
CONCEALED = lib.CS_FRAME_CONCEALED


def _leg(speech: npt.NDArray[np.int16], index: int, packets: int) -> Leg:
    start = index * 7 * FRAME
    return Leg(speech[start : start + packets * FRAME], ssrc=0x5EED0000 + index, ts0=index * 999)


def test_speech_stream_arrives_intact(ingest: Ingest, speech: npt.NDArray[np.int16]) -> None:
    leg = _leg(speech, 0, 80)
    sid = ingest.add_stream(0)
    dest = ingest.local_address(sid)
    frames = run_realtime(ingest, leg.packets, lambda k: leg.send(k, dest))[sid]

    # packet 0 is the source lock's probation; the last few are still buffered
    normal = assert_exact(frames, leg, min_frames=leg.packets - 10)
    assert set(flags_between_first_and_last_normal(frames)) == {NORMAL}
    real = np.concatenate([normal[off] for off in sorted(normal)]).astype(float)
    src = np.concatenate([leg.source[off : off + FRAME] for off in sorted(normal)])
    assert np.corrcoef(src.astype(float), real)[0, 1] > 0.99  # µ-law is ~38 dB SNR

    wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == leg.packets)

    c = ingest.stream_counters(sid)
    assert c["datagrams"] == leg.packets
    assert c["srclock"]["probation_dropped"] == 1
    assert c["inserted"] == leg.packets - 1
    assert c["outcomes"][lib.CS_PKT_IN_ORDER] == leg.packets - 1
    assert c["locked_addr"] == leg.sock.getsockname()
    assert c["locked_ssrc"] == leg.ssrc
    assert 0 < c["first_arrival_ns"] < c["last_arrival_ns"]  # kernel receive times
    st = ingest.stream_stats(sid)
    assert (st["packets_received"], st["packets_lost"], st["packets_late"]) == (79, 0, 0)
    g = ingest.counters()
    assert g["datagrams"] == g["inserted"] + 1
    assert sum(g["parse_errors"].values()) == 0
    assert g["no_timestamp"] == 0  # every datagram carried its kernel receive time
    lat = ingest.latency()
    assert lat.count == leg.packets - 1
    assert int(lat.counts.sum()) == lat.count
    assert lat.negative == 0


def test_single_loss_recovers_without_stall(ingest: Ingest, speech: npt.NDArray[np.int16]) -> None:
    """aiortc#543: after one lost packet the output must go back to NORMAL frames."""
    leg = _leg(speech, 1, 70)
    lost = 30
    sid = ingest.add_stream(0)
    dest = ingest.local_address(sid)
    frames = run_realtime(ingest, leg.packets, lambda k: k != lost and leg.send(k, dest))[sid]
    wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == leg.packets - 1)

    assert_exact(frames, leg, min_frames=leg.packets - 12)
    flags = flags_between_first_and_last_normal(frames)
    bad = [i for i, f in enumerate(flags) if f != NORMAL]
    assert all(flags[i] == CONCEALED for i in bad)
    assert 1 <= len(bad) <= 2 and bad == list(range(bad[0], bad[0] + len(bad)))
    assert len(flags) - bad[-1] > 20  # plenty of NORMAL frames after the loss
    st = ingest.stream_stats(sid)
    assert st["packets_lost"] == 1
    assert st["concealment_events"] == 1
    assert st["packets_gap"] == 1


def test_many_streams_at_once(ingest: Ingest, speech: npt.NDArray[np.int16]) -> None:
    legs = [_leg(speech, i, 60) for i in range(24)]
    ids = [ingest.add_stream(0) for _ in legs]
    dests = [ingest.local_address(sid) for sid in ids]

    def tick(k: int) -> None:
        for leg, dest in zip(legs, dests, strict=True):
            leg.send(k, dest)

    frames = run_realtime(ingest, 60, tick)
    wait_until(lambda: ingest.counters()["datagrams"] == 24 * 60)
    for sid, leg in zip(ids, legs, strict=True):
        assert_exact(frames[sid], leg, min_frames=50)
        assert ingest.stream_counters(sid)["inserted"] == 59
    assert ingest.counters()["datagrams"] == 24 * 60


def _call_with_spoofer(
    speech: npt.NDArray[np.int16], spoof: bool
) -> tuple[dict[int, npt.NDArray[np.int16]], dict[str, int], dict[str, object], int]:
    leg = _leg(speech, 2, 70)
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    sent = 0
    with Ingest(4) as ing:
        sid = ing.add_stream(0)
        dest = ing.local_address(sid)

        def tick(k: int) -> None:
            nonlocal sent
            leg.send(k, dest)
            if spoof and k >= 10:  # live call: 1,000 pps of in-window packets, same SSRC
                for j in range(20):
                    seq = leg.seq0 + k + 1 + j % 5
                    ts = leg.ts0 + (k + 1 + j % 5) * FRAME
                    attacker.sendto(rtp_packet(seq, ts, leg.ssrc, b"\x00" * FRAME), dest)
                    sent += 1

        frames = run_realtime(ing, leg.packets, tick)[sid]
        wait_until(lambda: ing.stream_counters(sid)["datagrams"] == leg.packets + sent)
        normal = assert_exact(frames, leg, min_frames=leg.packets - 12)
        assert set(flags_between_first_and_last_normal(frames)) == {NORMAL}
        result = normal, ing.stream_stats(sid), ing.stream_counters(sid), sent
    attacker.close()
    return result


def test_spoofed_source_cannot_change_the_audio(speech: npt.NDArray[np.int16]) -> None:
    """RTP Bleed (AST-2017-005): a foreign port injecting the call's SSRC changes nothing."""
    clean, clean_stats, _, _ = _call_with_spoofer(speech, spoof=False)
    attacked, stats, counters, spoofed = _call_with_spoofer(speech, spoof=True)
    assert spoofed == 20 * 60
    srclock = counters["srclock"]
    assert isinstance(srclock, dict)
    assert srclock["rejected_address"] == spoofed
    assert stats["packets_received"] == clean_stats["packets_received"] == 69
    assert stats["packets_duplicate"] == 0
    common = sorted(set(clean) & set(attacked))
    assert len(common) >= 55
    for off in common:  # bit-identical to the clean run
        np.testing.assert_array_equal(attacked[off], clean[off])


MALFORMED: dict[str, bytes] = {
    "short": b"\x80\x00\x01",
    "version": b"\x40\x00" + b"\x00" * 170,
    "csrc": b"\x8f\x00" + b"\x00" * 10 + b"\x00" * 8,
    "extension": b"\x90\x00" + b"\x00" * 10 + b"\xbe\xde\x00\x40" + b"\x00" * 8,
    "padding": b"\xa0\x00" + b"\x00" * 10 + b"\x11" * 20 + b"\x00",
    "rtcp": b"\x80\xc8\x00\x06" + b"\x00" * 24,
}


def test_malformed_datagrams_counted_per_reason(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    legs = [_leg(speech, 3, 60), _leg(speech, 4, 60)]
    ids = [ingest.add_stream(0) for _ in legs]
    dests = [ingest.local_address(sid) for sid in ids]
    fuzzer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent_bad = 0

    def tick(k: int) -> None:
        nonlocal sent_bad
        for leg, dest in zip(legs, dests, strict=True):
            leg.send(k, dest)
        if 5 <= k < 45:  # malformed traffic into the first call, ahead of its packets
            for blob in MALFORMED.values():
                fuzzer.sendto(blob, dests[0])
            if k % 10 == 0:
                fuzzer.sendto(b"\x80" + b"\x00" * 2100, dests[0])  # > max_datagram (2048)
            sent_bad += 1

    frames = run_realtime(ingest, 60, tick)
    fuzzer.close()
    wait_until(lambda: ingest.counters()["datagrams"] == 2 * 60 + 40 * 6 + 4)
    for sid, leg in zip(ids, legs, strict=True):
        assert_exact(frames[sid], leg, min_frames=50)
        assert set(flags_between_first_and_last_normal(frames[sid])) == {NORMAL}
    expected = {reason: sent_bad for reason in MALFORMED}
    assert ingest.counters()["parse_errors"] == expected
    c0, c1 = (ingest.stream_counters(sid) for sid in ids)
    assert c0["parse_errors"] == expected
    assert c0["truncated"] == 4 == ingest.counters()["truncated"]
    assert sum(c1["parse_errors"].values()) == 0
    assert c0["inserted"] == c1["inserted"] == 59


def test_streams_added_and_removed_while_traffic_flows(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    legs = [_leg(speech, i, 70) for i in range(5, 10)]
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in legs]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ids: list[int | None] = [ingest.add_stream(s) for s in socks[:4]] + [None]
    removed_id = ids[1]

    def tick(k: int) -> None:
        if k == 25:
            assert removed_id is not None
            ingest.remove_stream(removed_id)
        if k == 30:
            ids[4] = ingest.add_stream(socks[4])
        for i, leg in enumerate(legs):
            if i < 4 or k >= 30:  # traffic to the removed port keeps coming
                leg.send(k - 30 if i == 4 else k, socks[i].getsockname())

    frames = run_realtime(ingest, 70, tick)
    for i in (0, 2, 3):
        sid = ids[i]
        assert sid is not None
        assert_exact(frames[sid], legs[i], min_frames=58)
        assert set(flags_between_first_and_last_normal(frames[sid])) == {NORMAL}
    new_id = ids[4]
    assert new_id is not None and new_id != removed_id
    assert_exact(frames[new_id], legs[4], min_frames=28)
    assert removed_id is not None
    assert len(frames[removed_id]) == 25
    with pytest.raises(IngestError) as err:
        ingest.stream_counters(removed_id)
    assert err.value.errno == errno.ENOENT
    for s in socks:  # the caller's sockets were never closed by the C side
        assert s.fileno() >= 0
        s.close()


def test_rearm_moves_the_lock_to_the_new_source(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """Re-INVITE: media moves to a new port and SSRC; before the rearm it is rejected,
    after it the old source is heard until the new one has passed probation."""
    old, new = _leg(speech, 10, 70), _leg(speech, 11, 40)
    new.ts0 = old.ts0 + 30 * FRAME  # same timeline: at tick k both send ts0 + k * FRAME
    sid = ingest.add_stream(0)
    dest = ingest.local_address(sid)

    def tick(k: int) -> None:
        if k == 35:
            ingest.rearm(sid, time.monotonic_ns())
        if k < 40:
            old.send(k, dest)
        if k >= 30:  # the new source starts early: rejected until the rearm
            new.send(k - 30, dest)

    frames = run_realtime(ingest, 70, tick)[sid]
    wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == 40 + 40)
    c = ingest.stream_counters(sid)
    assert c["locked_addr"] == new.sock.getsockname()
    assert c["locked_ssrc"] == new.ssrc
    # 5 new packets before the rearm, then old packets 37..39 after the new one locked
    assert c["srclock"]["rejected_address"] == 5 + 3
    assert c["srclock"]["probation_dropped"] == 1 + 1
    assert (c["srclock"]["rearms"], c["srclock"]["learned"]) == (1, 2)
    tail = frames[-20:]
    assert [f.flag for f in tail] == [NORMAL] * 20
    for f in tail:
        assert f.rtp_ts is not None
        off = (f.rtp_ts - new.ts0) & 0xFFFFFFFF
        np.testing.assert_array_equal(f.pcm, new.decoded[off : off + FRAME])


def test_pull_of_unknown_id_yields_empty_frame(ingest: Ingest) -> None:
    pcm = np.full(2 * FRAME, 7, dtype=np.int16)
    infos = ffi.new("cs_frame_info[2]")
    ids = ffi.new("int32_t[2]", [12345, -1])
    got = lib.cs_ingest_pull(
        ingest._ing, 0, ids, 2, ffi.from_buffer("int16_t[]", pcm), FRAME, infos
    )
    assert got == 0
    assert [infos[i].samples for i in range(2)] == [0, 0]
    assert [infos[i].flag for i in range(2)] == [lib.CS_FRAME_NOT_STARTED] * 2
    assert not pcm.any()


def _receiver_tid() -> int:
    import os

    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().strip() == "cs-ingest":
                return int(tid)
    raise AssertionError("no cs-ingest thread")


def test_real_time_receiver_thread(speech: npt.NDArray[np.int16]) -> None:
    import os

    with pytest.raises(ValueError):
        Ingest(8, rt_priority=100)
    with Ingest(8) as plain:
        assert plain.sched() == 0
        assert os.sched_getscheduler(_receiver_tid()) == os.SCHED_OTHER
    idle = Ingest(8, rt_priority=10)
    assert idle.sched() == 0  # asked for, but no thread yet
    idle.close()
    with Ingest(8, rt_priority=10) as ing:
        leg = _leg(speech, 0, 40)
        sid = ing.add_stream(0)
        dest = ing.local_address(sid)
        frames = run_realtime(ing, leg.packets, lambda k: leg.send(k, dest))[sid]
        state = ing.sched()
        policy = os.sched_getscheduler(_receiver_tid())
        # granted (root / CAP_SYS_NICE): SCHED_FIFO; refused: -errno and it runs normally
        assert (state, policy) == (1, os.SCHED_FIFO) or (state < 0 and policy == os.SCHED_OTHER)
        if state == 1:
            assert os.sched_getparam(_receiver_tid()).sched_priority == 10
        assert_exact(frames, leg, min_frames=leg.packets - 15)
        # every inserted datagram has its own latency stamp, none before its arrival
        lat = ing.latency()
        assert lat.count == ing.counters()["inserted"] > 0 and lat.negative == 0
        assert ing.processing().count == lat.count
