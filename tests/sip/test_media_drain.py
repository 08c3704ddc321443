"""An ended call's legs play out what their jitter buffers hold before they close
(MediaEngine.drain_legs): the analysis and the evidence get a call's last target delay
of audio, which closing at once threw away. Real native ingest, real playout thread."""

from __future__ import annotations

import threading
import time

import numpy as np

from native.codec import ulaw_decode, ulaw_encode
from native.ingest import Ingest
from native.jitter import PayloadType
from sip_bridge.media import MediaEngine, PortRange
from sip_bridge.sinks import CaptureSink

PCMU = (PayloadType(0, "PCMU"),)
FRAMES = 25  # 0.5 s
TS0 = 123_456


def _engine() -> tuple[MediaEngine, CaptureSink, Ingest]:
    ingest = Ingest(max_streams=8)
    sink = CaptureSink()
    media = MediaEngine(ingest, PortRange(30000, 30000, 60.0), sink)
    ingest.start()
    media.start()
    return media, sink, ingest


def _frames() -> list[bytes]:
    rng = np.random.default_rng(7)
    pcm = (rng.standard_normal(FRAMES * 160) * 3000).astype(np.int16)
    return [ulaw_encode(pcm[i * 160 : (i + 1) * 160]) for i in range(FRAMES)]


def test_an_ended_legs_buffered_tail_reaches_the_sink_before_it_closes() -> None:
    media, sink, ingest = _engine()
    try:
        leg = media.open_pushed_leg("call.0", PCMU)
        payloads = _frames()
        start = time.monotonic_ns()
        for i, payload in enumerate(payloads):  # paced in real time, as a live call
            while time.monotonic_ns() < start + i * 20_000_000:
                time.sleep(0.001)
            leg.push_payload(0, 1000 + i, TS0 + 160 * i, 0xABCD, payload, time.monotonic_ns())
        done = threading.Event()
        assert media.drain_legs(["call.0"], done.set) is False  # audio is still buffered
        assert leg.push_payload(0, 2000, TS0 + 160 * FRAMES, 0xABCD, payloads[0], 0) == -1
        assert done.wait(2.0), "the drain never finished"
        assert media.leg_ids == [] and media.drained_legs == 1
        captured = sink.captured("call.0").by_rtp_ts
        assert sorted(captured) == [TS0 + 160 * i for i in range(FRAMES)]  # the tail too
        for i, payload in enumerate(payloads):
            assert np.array_equal(captured[TS0 + 160 * i], ulaw_decode(payload)), i
    finally:
        media.stop()
        ingest.close()


def test_a_leg_that_received_nothing_closes_at_once() -> None:
    media, _, ingest = _engine()
    try:
        media.open_pushed_leg("quiet.0", PCMU)
        called: list[bool] = []
        assert media.drain_legs(["quiet.0"], lambda: called.append(True)) is True
        assert media.leg_ids == [] and called == []
    finally:
        media.stop()
        ingest.close()


def test_stop_closes_draining_legs_and_finishes_their_calls() -> None:
    media, _, ingest = _engine()
    try:
        leg = media.open_pushed_leg("call.0", PCMU)
        payload = _frames()[0]
        now = time.monotonic_ns()
        for i in range(3):
            leg.push_payload(0, i, TS0 + 160 * i, 1, payload, now)
        called: list[bool] = []
        assert media.drain_legs(["call.0"], lambda: called.append(True)) is False
        media.stop()
        assert called == [True] and media.leg_ids == []
    finally:
        media.stop()
        ingest.close()
