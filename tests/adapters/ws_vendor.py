"""Helpers for the media-WebSocket conformance tests: a real bridge's adapter counters
and legs, real speech, and the bit-exact check of what reached the frame sink."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import websockets
from websockets.asyncio.client import ClientConnection

from sip_bridge.calls import Call
from sip_bridge.sinks import CapturedLeg
from tests.sip.bridge_runner import RunningBridge

FRAME_MS = 20


def adapter_stats(bridge: RunningBridge, name: str) -> dict[str, Any]:
    api = bridge.bridge.api
    assert api is not None

    def snap() -> dict[str, Any]:
        stats: dict[str, Any] = api.app.state.adapter_stats[name].snapshot()
        return stats

    return bridge.on_loop(snap)


def leg_stats(bridge: RunningBridge, leg_id: str) -> dict[str, Any]:
    return bridge.on_loop(lambda: bridge.bridge.media.stats(leg_id))


def live_call(bridge: RunningBridge, key: str, value: str) -> Call | None:
    """The live call whose external id ``key`` is ``value``."""
    for call in bridge.calls().values():
        if call.external_ids.get(key) == value:
            return call
    return None


def legs_by_label(call: Call) -> dict[str, str]:
    return {leg.label or "": leg_id for leg_id, leg in call.legs.items()}


def bit_exact(cap: CapturedLeg, decoded: npt.NDArray[np.int16]) -> tuple[int, int, int]:
    """(frames equal to the source at their own position, frames that are not, the RTP
    timestamp of the source's first sample).

    The leg's RTP timestamps start at a random value, so the loudest captured frame
    (unique in real speech) places the stream; every other frame must then sit at its
    timestamp's distance from it."""
    assert cap.by_rtp_ts, "no audio reached the sink"
    loud_ts = max(cap.by_rtp_ts, key=lambda t: float(np.abs(cap.by_rtp_ts[t]).sum()))
    loud = cap.by_rtp_ts[loud_ts]
    windows = np.lib.stride_tricks.sliding_window_view(decoded, loud.size)
    matches = np.flatnonzero((windows == loud).all(axis=1))
    assert matches.size == 1, f"the loudest frame matches {matches.size} places"
    origin = loud_ts - int(matches[0])
    good = bad = 0
    for ts, pcm in cap.by_rtp_ts.items():
        off = (ts - origin) & 0xFFFFFFFF
        ref = decoded[off : off + pcm.size]
        if ref.size == pcm.size and np.array_equal(ref, pcm):
            good += 1
        else:
            bad += 1
    return good, bad, origin


def overlapping(cap: CapturedLeg, origin: int, start: int, end: int) -> list[int]:
    """Source offsets of the captured frames that overlap samples [start, end)."""
    offsets = [(ts - origin) & 0xFFFFFFFF for ts in cap.by_rtp_ts]
    return sorted(
        o
        for o, ts in zip(offsets, cap.by_rtp_ts, strict=True)
        if o < end and o + cap.by_rtp_ts[ts].size > start
    )


async def close_of(ws: ClientConnection, limit_s: float = 5.0) -> tuple[int, str]:
    """Read until the server closes; (code, reason) of its close frame."""
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            await asyncio.wait_for(ws.recv(), deadline - time.monotonic())
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None, "closed without a close frame"
        return exc.rcvd.code, exc.rcvd.reason
    raise AssertionError("the server did not close the connection")


async def refused_status(uri: str, headers: dict[str, str]) -> int:
    """The HTTP status of an upgrade the server refuses."""
    try:
        async with websockets.connect(uri, additional_headers=headers, open_timeout=5):
            pass
    except websockets.InvalidStatus as exc:
        return exc.response.status_code
    raise AssertionError("the upgrade was accepted")


async def pace(t0: float, k: int) -> None:
    """Sleep until frame ``k`` of a stream that started at ``t0`` is due."""
    delay = t0 + k * FRAME_MS / 1000 - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
