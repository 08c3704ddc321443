"""WHIP (RFC 9725) against the real bridge over real HTTP, ICE, DTLS and SRTP on
127.0.0.1: an aiortc publisher plays real speech; the audio that reaches the frame sink
is the file's, the call starts with the requested role and ids and ends on DELETE, and
bad requests get their clear status (counted) without touching the live call."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import LegRole
from sip_bridge.adapters.whip import WhipApi
from sip_bridge.bench.whip_client import FRAME, WhipError, publish
from tests.adapters.tenant_checks import TENANTS, rejected, tenant_of
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

TOKEN = "whip-secret-1"
ORIGIN = "http://console.example"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def bridge() -> Iterator[RunningBridge]:
    running = RunningBridge(
        whip_token=TOKEN,
        whip_ice_addresses="127.0.0.1",
        whip_cors_origins=ORIGIN,
        whip_codecs="opus,PCMU",
        rtp_timeout_s=1.5,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _base(bridge: RunningBridge) -> str:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return f"http://{host}:{port}/v1/whip"


def _whip(bridge: RunningBridge) -> WhipApi:
    assert bridge.bridge.api is not None
    app: Any = bridge.bridge.api.app
    whip: WhipApi = app.state.whip
    return whip


def _events(bridge: RunningBridge, call_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.reason) for e in bridge.publisher.of(call_id)]


def _new_call(bridge: RunningBridge, known: set[str]) -> str:
    calls = [e.call_id for e, _ in bridge.publisher.events if e.event == "started"]
    fresh = [c for c in calls if c not in known]
    assert len(fresh) == 1, calls
    return fresh[0]


def _snr_db(bridge: RunningBridge, leg_id: str, audio: npt.NDArray[np.int16]) -> tuple[float, int]:
    """The captured NORMAL frames against the source, aligned by RTP timestamp (the
    first frame's offset in the file found by search): SNR in dB and frames compared."""
    cap = bridge.sink.captured(leg_id)
    ts = sorted(cap.by_rtp_ts)
    assert ts, "no NORMAL frame reached the sink"
    frames = audio.size // FRAME
    best = (-1e9, 0)
    for k0 in range(0, 25):
        sig = err = 0.0
        n = 0
        for t in ts:
            k = k0 + ((t - ts[0]) % (1 << 32)) // FRAME
            if k >= frames:
                continue
            ref = audio[k * FRAME : (k + 1) * FRAME].astype(np.float64)
            got = cap.by_rtp_ts[t].astype(np.float64)
            sig += float(ref @ ref)
            err += float((got - ref) @ (got - ref))
            n += 1
        snr = 10 * np.log10(sig / max(err, 1.0))
        best = max(best, (snr, n))
    return best


def test_publish_delivers_the_speech_and_delete_ends_the_call(
    bridge: RunningBridge, shared_dir: Path
) -> None:
    audio = load_speech(shared_dir, 3.0)
    url = _base(bridge)

    async def run() -> None:
        known = {e.call_id for e, _ in bridge.publisher.events}
        async with httpx.AsyncClient(timeout=10) as client:
            pub = await publish(
                client,
                url,
                TOKEN,
                audio,
                loop=False,
                extra_headers={
                    "X-CallShield-Role": "internal",
                    "X-CallShield-Call-Id": "cc-4711",
                    "X-CallShield-Ext-Queue": "fraud-desk",
                    "X-CallShield-Ani": "+15551230000",
                },
            )
            assert pub.resource.startswith(url + "/") and len(pub.resource) > len(url) + 16
            assert pub.etag.startswith('"') and pub.etag.endswith('"')
            assert "a=recvonly" in pub.answer and "PCMU/8000" in pub.answer
            call_id = _new_call(bridge, known)
            started, call = next((e, c) for e, c in bridge.publisher.events if e.call_id == call_id)
            assert call.kind == "webrtc" and call.ani == "+15551230000"
            assert started.external_ids == {"call_id": "cc-4711", "queue": "fraud-desk"}
            (leg,) = call.legs.values()
            assert (leg.role, leg.role_source, leg.codec) == (LegRole.INTERNAL, "api", "PCMU")
            while pub.track.frames_sent < audio.size // FRAME + 10:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.4)  # the jitter buffer's delay
            assert await pub.delete(client) == 200
            assert await asyncio.to_thread(wait_for, lambda: not bridge.calls())
            assert _events(bridge, call_id) == [("started", ""), ("ended", "whip_delete")]
            r = await client.delete(pub.resource, headers=AUTH)
            assert r.status_code == 404
        snr, compared = _snr_db(bridge, leg.leg_id, audio)
        assert compared >= 0.9 * (audio.size // FRAME) and snr > 30.0, (snr, compared)

    asyncio.run(run())
    stats = _whip(bridge).stats()
    assert stats["packets"] >= 150 and stats["ended"]["whip_delete"] >= 1  # type: ignore[index]


def _laid_out(bridge: RunningBridge, leg_id: str, clock: int) -> npt.NDArray[np.float64]:
    """The leg's NORMAL 8 kHz frames placed by RTP timestamp (``clock`` Hz), gaps zero."""
    cap = bridge.sink.captured(leg_id)
    ts = sorted(cap.by_rtp_ts)
    assert ts, "no NORMAL frame reached the sink"
    out = np.zeros(((ts[-1] - ts[0]) % (1 << 32)) * 8000 // clock + FRAME)
    for t in ts:
        k = ((t - ts[0]) % (1 << 32)) * 8000 // clock
        out[k : k + FRAME] = cap.by_rtp_ts[t]
    return out


def _correlation(received: npt.NDArray[np.float64], source: npt.NDArray[np.int16]) -> float:
    """Pearson r of the received audio and the source at the lag of their best
    cross-correlation (Opus delays the audio by a few samples; the first frames may be
    the jitter buffer's start)."""
    ref = source.astype(np.float64)
    size = 1 << (ref.size + received.size).bit_length()
    xc = np.fft.irfft(np.fft.rfft(received, size) * np.conj(np.fft.rfft(ref, size)), size)
    lag = int(np.argmax(xc[:4000]))  # the received audio starts at most 0.5 s late
    n = min(received.size - lag, ref.size)
    return float(np.corrcoef(received[lag : lag + n], ref[:n])[0, 1])


def test_opus_is_chosen_and_decoded_by_the_native_core(
    bridge: RunningBridge, shared_dir: Path
) -> None:
    audio = load_speech(shared_dir, 3.0, skip=5)
    url = _base(bridge)

    async def run() -> str:
        known = {e.call_id for e, _ in bridge.publisher.events}
        async with httpx.AsyncClient(timeout=10) as client:
            # the publisher prefers PCMU; the bridge's preference (opus) decides, and
            # the answer carries that one codec only, so it is what the sender uses
            pub = await publish(client, url, TOKEN, audio, codecs=("PCMU", "opus"), loop=False)
            assert re.findall(r"a=rtpmap:\d+ (\S+)", pub.answer) == ["opus/48000/2"]
            call_id = _new_call(bridge, known)
            while pub.track.frames_sent < audio.size // FRAME + 10:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.4)
            assert await pub.delete(client) == 200
        (leg,) = bridge.publisher.of(call_id)[0].legs
        return leg

    leg_id = asyncio.run(run())
    call = next(c for e, c in bridge.publisher.events if leg_id in c.legs)
    assert call.legs[leg_id].codec == "opus"
    received = _laid_out(bridge, leg_id, 48000)
    assert received.size >= audio.size * 0.9
    assert _correlation(received, audio) >= 0.9


def test_bad_requests_are_refused_and_counted_without_touching_a_live_call(
    bridge: RunningBridge, shared_dir: Path
) -> None:
    audio = load_speech(shared_dir, 2.0)
    url = _base(bridge)
    sdp = {"Content-Type": "application/sdp"}

    async def run() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            known = {e.call_id for e, _ in bridge.publisher.events}
            live = await publish(client, url, TOKEN, audio)
            call_id = _new_call(bridge, known)
            leg_id = next(iter(bridge.calls()[call_id].legs))
            before = _whip(bridge).stats()
            for headers in (
                {},
                {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": "Basic x"},
            ):
                r = await client.post(url, content="v=0\r\n", headers={**sdp, **headers})
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
            r = await client.post(url, json={"sdp": "v=0"}, headers=AUTH)
            assert r.status_code == 415
            bad_sdps = [
                b"\xff\xfe not utf-8",
                b"hello",
                live.answer.replace("m=audio", "m=video").encode(),  # no audio m-line
            ]
            for body in bad_sdps:
                r = await client.post(url, content=body, headers={**AUTH, **sdp})
                assert r.status_code == 400 and r.json()["detail"], body[:20]
            r = await client.post(url, content=b"v" * 70_000, headers={**AUTH, **sdp})
            assert r.status_code == 413
            with pytest.raises(WhipError) as refused:
                await publish(
                    client, url, TOKEN, audio, extra_headers={"X-CallShield-Role": "boss"}
                )
            assert refused.value.status == 400
            with pytest.raises(WhipError) as refused:  # PCMA only: no codec in common
                await publish(client, url, TOKEN, audio, codecs=("PCMA",))
            assert refused.value.status == 400
            r = await client.delete(url + "/no-such-session", headers=AUTH)
            assert r.status_code == 404
            r = await client.delete(live.resource)
            assert r.status_code == 401
            r = await client.patch(
                live.resource,
                content=b"a=ice-ufrag:x",
                headers={**AUTH, "Content-Type": "application/trickle-ice-sdpfrag"},
            )
            assert r.status_code == 405 and r.headers["allow"] == "DELETE, OPTIONS"
            # OPTIONS and the CORS preflight a browser on another origin sends first
            r = await client.options(url)
            assert r.status_code == 204 and r.headers["accept-post"] == "application/sdp"
            pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
            asked = "authorization, content-type, x-callshield-role, x-evil"
            r = await client.options(url, headers={**pre, "Access-Control-Request-Headers": asked})
            assert r.status_code == 204 and r.headers["access-control-allow-origin"] == ORIGIN
            assert "POST" in r.headers["access-control-allow-methods"]
            allowed = r.headers["access-control-allow-headers"]
            assert allowed == "authorization, content-type, x-callshield-role"
            r = await client.options(url, headers={**pre, "Origin": "http://evil.example"})
            assert "access-control-allow-origin" not in r.headers
            # the live call never noticed
            flowing = bridge.sink.counts(leg_id).get("normal", 0)
            await asyncio.sleep(0.5)
            assert bridge.sink.counts(leg_id).get("normal", 0) >= flowing + 20
            assert _events(bridge, call_id) == [("started", "")]
            after = _whip(bridge).stats()
            assert await live.delete(client) == 200
        requests = after["requests"]
        assert isinstance(requests, dict)
        grew = {k: v - before["requests"].get(k, 0) for k, v in requests.items()}  # type: ignore[attr-defined]
        assert grew["unauthorized"] == 4 and grew["bad_content_type"] == 1
        assert grew["bad_sdp"] == 5 and grew["too_large"] == 1 and grew["patch"] == 1
        assert grew["unknown_resource"] == 1 and grew["options"] == 3

    asyncio.run(run())


def test_a_session_ends_with_its_call_when_the_peer_goes_silent_or_away(
    bridge: RunningBridge, shared_dir: Path
) -> None:
    """RTP timeout (the bridge ends the call: the peer connection is closed and the
    resource gone) and a peer that closes without DELETE."""
    audio = load_speech(shared_dir, 1.0)
    url = _base(bridge)

    async def run() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            known = {e.call_id for e, _ in bridge.publisher.events}
            silent = await publish(client, url, TOKEN, audio)
            silent_call = _new_call(bridge, known)
            known.add(silent_call)
            gone = await publish(client, url, TOKEN, audio)
            gone_call = _new_call(bridge, known)
            await asyncio.sleep(0.5)
            silent.track.stop()  # RTP stops, the peer connection stays up
            await gone.pc.close()  # no DELETE
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (
                len(_events(bridge, silent_call)) < 2 or len(_events(bridge, gone_call)) < 2
            ):
                await asyncio.sleep(0.1)
            assert _events(bridge, silent_call)[-1] == ("ended", "rtp_timeout")
            assert _events(bridge, gone_call)[-1] == ("ended", "peer_closed")  # DTLS close
            await asyncio.sleep(0.5)  # the session watcher's period
            for pub in (silent, gone):
                r = await client.delete(pub.resource, headers=AUTH)
                assert r.status_code == 404
            assert silent.pc.connectionState in ("closed", "failed")
            await silent.pc.close()

    asyncio.run(run())


def test_tenant_header_or_query_names_the_tenant_and_junk_falls_back(shared_dir: Path) -> None:
    """``X-CallShield-Tenant`` or ``?tenant=``: a known id is the call's tenant; header
    and query disagreeing (conflicting) or an unknown id is counted and the call takes
    the DNIS mapping or the default; the offer is answered 201 either way."""
    audio = load_speech(shared_dir, 1.0)
    running = RunningBridge(whip_token=TOKEN, whip_ice_addresses="127.0.0.1", **TENANTS)
    running.start()
    try:
        url = _base(running)

        async def run() -> None:
            async with httpx.AsyncClient(timeout=10) as client:
                calls, pubs = [], []
                for endpoint, headers in (
                    (url, {"X-CallShield-Tenant": "ACME"}),
                    (
                        url + "?tenant=globex",
                        {"X-CallShield-Tenant": "acme", "X-CallShield-Dnis": "+18005550100"},
                    ),
                    (url + "?tenant=initech", {}),
                ):
                    known = {e.call_id for e, _ in running.publisher.events}
                    pubs.append(
                        await publish(client, endpoint, TOKEN, audio, extra_headers=headers)
                    )
                    calls.append(_new_call(running, known))
                assert tenant_of(running, calls[0]) == ("acme", "whip_request", "acme")
                assert tenant_of(running, calls[1]) == ("globex", "dnis_prefix", "globex")
                assert tenant_of(running, calls[2]) == ("default", "default", "default")
                assert rejected(running) == {
                    ("whip_request", "conflicting"): 1,
                    ("whip_request", "unknown"): 1,
                }
                for pub in pubs:
                    assert await pub.delete(client) == 200

        asyncio.run(run())
    finally:
        running.stop()


def test_whip_is_off_without_a_token() -> None:
    running = RunningBridge()
    running.start()
    try:
        url = _base(running)
        r = httpx.post(url, content=b"v=0\r\n", headers={**AUTH, "Content-Type": "application/sdp"})
        assert r.status_code == 403
        assert httpx.options(url).status_code == 403
        assert httpx.delete(url + "/x", headers=AUTH).status_code == 403
    finally:
        running.stop()


def test_stopping_the_bridge_closes_live_sessions(shared_dir: Path) -> None:
    """Drain ends the call; the API server's close hook closes every peer connection
    (the publisher sees its connection closed) and leaves no session behind."""
    audio = load_speech(shared_dir, 1.0)
    running = RunningBridge(whip_token=TOKEN, whip_ice_addresses="127.0.0.1", drain_timeout_s=0.5)
    running.start()
    whip = _whip(running)
    url = _base(running)

    async def run() -> str:
        async with httpx.AsyncClient(timeout=10) as client:
            pub = await publish(client, url, TOKEN, audio)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(running.stop)
            deadline = time.monotonic() + 5
            while pub.pc.connectionState != "closed" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            state = pub.pc.connectionState
            await pub.pc.close()
            return state

    assert asyncio.run(run()) == "closed"
    assert running.events() == [("started", ""), ("ended", "drained")]
    assert whip.sessions.sessions == {}
    ended = whip.stats()["ended"]
    assert isinstance(ended, dict) and sum(ended.values()) == 1
