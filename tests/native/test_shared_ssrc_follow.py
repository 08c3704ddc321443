"""A shared-port leg keyed by SSRC follows an SSRC change of its locked source without a
re-INVITE (a transfer or re-origination on the same 5-tuple): real UDP on 127.0.0.1,
audio checked bit-exactly on both sides of the change. A new SSRC from another source,
an SSRC interleaving with the live one, and a new SSRC from a source two legs share
are dropped and counted."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from rtp_call import (
    FRAME,
    Leg,
    assert_exact,
    frames_sent_by,
    run_realtime,
    source_of,
    wait_until,
)

from native.ingest import Ingest

BEFORE, GAP = 30, 5  # packets of the first SSRC, then 100 ms of silence (quiet >= 80 ms)


def test_a_new_ssrc_from_the_locked_source_is_followed(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    first = Leg(speech[: BEFORE * FRAME], ssrc=0x1111)
    # the same 5-tuple re-originates: new SSRC, sequence and timestamp base
    after = Leg(speech[FRAME * 40 : FRAME * 85], 0x2222, seq0=9000, ts0=7_000_000, sock=first.sock)
    stranger = Leg(speech[: 45 * FRAME], 0x3333)  # a new SSRC from another source
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    sid = ingest.add_stream_shared(kid, expected_source=source_of(first.sock), ssrc=first.ssrc)

    def tick(k: int) -> None:
        if k < BEFORE:
            first.send(k, dest)
            if 10 <= k < 15:  # interleaved with the live SSRC from its own source
                first.sock.sendto(after.packet(k), dest)
        elif 0 <= k - BEFORE - GAP < after.packets:
            after.send(k - BEFORE - GAP, dest)
            stranger.send(k - BEFORE - GAP, dest)

    frames = run_realtime(ingest, BEFORE + GAP + after.packets + 10, tick)[sid]
    wait_until(lambda: ingest.counters()["datagrams"] == BEFORE + 5 + 2 * after.packets)
    c = ingest.stream_counters(sid)
    assert (c["locked_ssrc"], c["srclock"]["ssrc_switches"], c["srclock"]["learned"]) == (
        after.ssrc,
        1,
        1,
    )
    assert c["srclock"]["rejected_ssrc"] == 5  # the interleaved ones: injection, dropped
    g = ingest.counters()
    assert (g["demux_ssrc_follows"], g["demux_conflicts"]) == (1, 0)
    assert g["unmatched"] == stranger.packets  # not the leg's source: RTP Bleed stays shut
    assert c["datagrams"] == BEFORE + 5 + after.packets
    assert_exact(frames_sent_by(frames, first), first, min_frames=BEFORE - 5)
    assert_exact(frames_sent_by(frames, after), after, min_frames=after.packets - 5)


def test_a_new_ssrc_from_a_source_two_legs_share_is_unmatched_until_one_leaves(
    ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    """A SIPREC-like pair from one port: a new SSRC there cannot be told to be either
    leg's. Once one leg is removed the source is the other's alone, and it follows."""
    one = Leg(speech[: 20 * FRAME], ssrc=0xA1)
    two = Leg(speech[FRAME * 20 : FRAME * 40], ssrc=0xB2, sock=one.sock)
    new = Leg(speech[FRAME * 40 : FRAME * 70], 0xC3, seq0=4000, ts0=3_000_000, sock=one.sock)
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    ids = [
        ingest.add_stream_shared(kid, expected_source=source_of(one.sock), ssrc=leg.ssrc)
        for leg in (one, two)
    ]

    def tick(k: int) -> None:
        if k < 20:
            one.send(k, dest)
            two.send(k, dest)
        elif 25 <= k < 35:
            new.send(k - 25, dest)  # both legs locked and quiet: still whose?
        elif k == 35:
            ingest.remove_stream(ids[1])
        elif 35 < k < 26 + new.packets:
            new.send(k - 26, dest)

    frames = run_realtime(ingest, 26 + new.packets + 10, tick)[ids[0]]
    wait_until(lambda: ingest.counters()["datagrams"] == 40 + new.packets)
    g = ingest.counters()
    assert (g["unmatched"], g["demux_ssrc_follows"]) == (10, 1)
    c = ingest.stream_counters(ids[0])
    assert (c["locked_ssrc"], c["datagrams"]) == (new.ssrc, 20 + new.packets - 10)
    normal = assert_exact(frames_sent_by(frames, new), new, min_frames=new.packets - 15)
    assert min(normal) >= 10 * FRAME  # nothing from before the other leg left
