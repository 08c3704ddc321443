"""Pushed streams: legs fed by an adapter thread instead of a socket (WebRTC after SRTP,
media WebSockets, AudioSocket). Same jitter buffer, same batch pull, same counters, in
virtual time: arrival and pull times are given, not read from a clock."""

from __future__ import annotations

import errno
import threading

import numpy as np
import numpy.typing as npt
import pytest
from rtp_call import (
    FRAME,
    TICK_NS,
    Frame,
    Leg,
    assert_exact,
    flags_between_first_and_last_normal,
)

from native import lib
from native.ingest import Ingest, IngestError

T0 = 1_000_000_000_000


def _frames(ingest: Ingest, sid: int, now_ns: int) -> tuple[int, int | None, npt.NDArray[np.int16]]:
    pulled = ingest.pull_all(now_ns)
    row = pulled.ids.tolist().index(sid)
    info = pulled.infos[row]
    ts = int(info["rtp_ts"]) if info["has_rtp_ts"] else None
    return int(info["flag"]), ts, pulled.pcm[row, : int(info["samples"])].copy()


def _run(
    ingest: Ingest, sid: int, order: list[int], leg: Leg, *, payload: bool = False
) -> list[Frame]:
    """Packet order[k] arrives at tick k; one pull per tick, then 20 ticks to drain."""
    out: list[Frame] = []
    for k in range(len(order) + 20):
        now = T0 + k * TICK_NS
        if k < len(order):
            i = order[k]
            if payload:
                body = leg.ulaw[i * FRAME : (i + 1) * FRAME]
                rc = ingest.push_payload(
                    sid, 0, leg.seq0 + i, leg.ts0 + i * FRAME, leg.ssrc, body, now
                )
            else:
                rc = ingest.push(sid, leg.packet(i), now)
            assert rc > 0
        flag, ts, pcm = _frames(ingest, sid, now + TICK_NS // 2)
        out.append(Frame(flag, ts, pcm))
    return out


@pytest.mark.parametrize("payload", [False, True], ids=["datagram", "payload"])
def test_pushed_speech_is_bit_exact(
    ingest: Ingest, speech: npt.NDArray[np.int16], payload: bool
) -> None:
    leg = Leg(speech[: 100 * FRAME], ssrc=0xABCD0001)
    sid = ingest.add_stream_push()
    frames = _run(ingest, sid, list(range(leg.packets)), leg, payload=payload)
    assert_exact(frames, leg, min_frames=leg.packets)
    assert set(flags_between_first_and_last_normal(frames)) == {lib.CS_FRAME_NORMAL}
    c = ingest.stream_counters(sid)
    assert (c["datagrams"], c["inserted"]) == (leg.packets, leg.packets)
    assert c["outcomes"][lib.CS_PKT_IN_ORDER] == leg.packets
    assert c["bytes"] == leg.packets * (12 + FRAME)
    assert c["last_arrival_ns"] == T0 + (leg.packets - 1) * TICK_NS
    assert c["first_arrival_ns"] == T0
    assert ingest.counters()["datagrams"] == 0  # the socket receiver saw none of it


def test_pushed_reorder_and_duplicates_are_handled_like_rtp(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    leg = Leg(speech[: 60 * FRAME], ssrc=0xABCD0002)
    order = list(range(leg.packets))
    order[10], order[11] = order[11], order[10]  # one swap
    order.insert(30, 29)  # one duplicate
    sid = ingest.add_stream_push()
    frames = _run(ingest, sid, order, leg)
    assert_exact(frames, leg, min_frames=leg.packets)
    c = ingest.stream_counters(sid)
    assert c["outcomes"][lib.CS_PKT_REORDERED] == 1
    assert c["outcomes"][lib.CS_PKT_DUPLICATE] == 1
    assert ingest.stream_stats(sid)["packets_lost"] == 0


def test_garbage_is_counted_and_the_stream_goes_on(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    leg = Leg(speech[: 20 * FRAME], ssrc=0xABCD0003)
    sid = ingest.add_stream_push()
    assert ingest.push(sid, b"\x00" * 5, T0) == 0  # short
    assert ingest.push(sid, b"\x40" + bytes(20), T0) == 0  # version 1
    frames = _run(ingest, sid, list(range(leg.packets)), leg)
    assert_exact(frames, leg, min_frames=leg.packets)
    c = ingest.stream_counters(sid)
    assert c["parse_errors"]["short"] == 1 and c["parse_errors"]["version"] == 1
    assert c["inserted"] == leg.packets


def test_push_needs_a_live_pushed_stream(ingest: Ingest) -> None:
    sock_sid = ingest.add_stream(0)
    with pytest.raises(IngestError) as exc:
        ingest.push(sock_sid, bytes(172), T0)  # a socket leg cannot be pushed into
    assert exc.value.errno == errno.ENOENT
    sid = ingest.add_stream_push()
    ingest.remove_stream(sid)
    with pytest.raises(IngestError) as exc:
        ingest.push_payload(sid, 0, 1, 0, 1, bytes(160), T0)
    assert exc.value.errno == errno.ENOENT
    sid2 = ingest.add_stream_push()
    with pytest.raises(IngestError) as exc:
        ingest.push_payload(sid2, 200, 1, 0, 1, bytes(160), T0)
    assert exc.value.errno == errno.EINVAL


def test_pushes_from_many_threads_land_in_their_own_streams(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """Adapters push from their own threads while the playout side pulls."""
    legs = [Leg(speech[i * 500 : i * 500 + 50 * FRAME], ssrc=0xCAFE0000 + i) for i in range(8)]
    sids = [ingest.add_stream_push() for _ in legs]

    def feed(sid: int, leg: Leg) -> None:
        for k in range(leg.packets):
            ingest.push(sid, leg.packet(k), T0 + k * TICK_NS)

    threads = [threading.Thread(target=feed, args=p) for p in zip(sids, legs, strict=True)]
    for t in threads:
        t.start()
    for k in range(30):  # pull concurrently with the pushers
        ingest.pull_all(T0 + k * TICK_NS)
    for t in threads:
        t.join()
    for sid, leg in zip(sids, legs, strict=True):
        c = ingest.stream_counters(sid)
        assert c["datagrams"] == leg.packets
        assert c["outcomes"][lib.CS_PKT_IN_ORDER] + c["outcomes"][lib.CS_PKT_LATE] == leg.packets
