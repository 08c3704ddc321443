"""FreeSWITCH mod_audio_fork / jambonz ``listen`` against a real bridge: a websockets
client sends what they send (one JSON text message with the call's metadata, then
binary 16-bit little-endian PCM, interleaved for stereo; jambonz digits as text events)
in real time, with real speech. The audio at the frame sink is compared bit for bit
with the source (L16 is lossless), one channel an asymmetric waveform that a byte-order
or channel mistake would change; 16 kHz goes through the native resampler. Auth and
draining refuse the upgrade; malformed streams are closed with their own code and
counted while another call keeps flowing."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import websockets
from scipy.signal import resample_poly
from websockets.asyncio.client import ClientConnection

from tests.adapters.tenant_checks import TENANTS, rejected, tenant_of
from tests.adapters.ws_vendor import (
    adapter_stats,
    bit_exact,
    close_of,
    leg_stats,
    legs_by_label,
    live_call,
    pace,
    refused_status,
)
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

TOKEN = "fork-token-0123456789"
BASIC = "jambonz:s3cret"
PATH = "/v1/audio-fork"
FRAME = 160  # 20 ms at 8 kHz


def _bridge(**settings: Any) -> RunningBridge:
    values: dict[str, Any] = {
        "audio_fork_token": TOKEN,
        "audio_fork_basic_auth": BASIC,
        "ws_media_burst_s": 1.0,
        **settings,
    }
    bridge = RunningBridge(**values)
    bridge.start()
    return bridge


def _uri(bridge: RunningBridge, query: str = "") -> str:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return f"ws://{host}:{port}{PATH}{query}"


def _basic(credential: str = BASIC) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credential.encode()).decode()}


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _ramp(n: int) -> npt.NDArray[np.int16]:
    """Asymmetric: neither its byte-swapped nor its negated self."""
    return ((np.arange(n) * 2741) % 60000 - 27000).astype(np.int16)


async def _stream(
    ws: ClientConnection,
    pcm: npt.NDArray[np.int16],
    samples: int,
    middle: list[str] | None = None,
    during: Any = None,
) -> None:
    """Binary messages of ``samples`` frames (rows of ``pcm``) every 20 ms; ``middle``
    text messages halfway, then ``during()`` is awaited once."""
    t0 = time.monotonic()
    frames = pcm.shape[0] // samples
    for k in range(frames):
        await pace(t0, k)
        if k == frames // 2:
            for text in middle or []:
                await ws.send(text)
            if during is not None:
                await during()
        await ws.send(pcm[k * samples : (k + 1) * samples].astype("<i2").tobytes())


def test_jambonz_listen_stereo_two_legs_bit_exact(shared_dir: Path) -> None:
    caller = load_speech(shared_dir, 1.6)
    callee = _ramp(caller.size)
    stereo = np.stack([caller, callee], axis=1)  # interleaved L/R = caller/callee
    metadata = {
        "callSid": "b4e1c0de-0000-4a4a-9e9e-000000000042",
        "from": "+15550123",
        "to": "+18005550100",
        "direction": "inbound",
        "sampleRate": 8000,
        "mixType": "stereo",
        "metadata": {"campaign": "spring"},
    }
    bridge = _bridge()
    seen: dict[str, Any] = {}
    try:

        async def run() -> None:
            async with websockets.connect(
                _uri(bridge), subprotocols=["audio.jambonz.org"], additional_headers=_basic()
            ) as ws:
                assert ws.subprotocol == "audio.jambonz.org"
                await ws.send(json.dumps(metadata))

                async def check_dtmf() -> None:
                    await asyncio.sleep(0.1)
                    call = live_call(bridge, "jambonz", metadata["callSid"])
                    assert call is not None
                    seen["call"] = call
                    legs = legs_by_label(call)
                    seen["dtmf"] = leg_stats(bridge, legs["caller"])["dtmf_events"]

                middle = [
                    json.dumps({"event": "dtmf", "dtmf": "5", "duration": "1280"}),
                    json.dumps({"event": "mark", "name": "m1"}),
                    json.dumps({"event": "surprise"}),
                    "{not json",
                ]
                await _stream(ws, stereo, FRAME, middle, check_dtmf)

        asyncio.run(run())
        call = seen["call"]
        assert (call.kind, call.ani, call.dnis, call.correlation_id) == (
            "jambonz",
            "+15550123",
            "+18005550100",
            metadata["callSid"],
        )
        legs = legs_by_label(call)
        roles = {leg.label: (leg.role.value, leg.role_source) for leg in call.legs.values()}
        assert roles == {
            "caller": ("external", "vendor_track"),
            "callee": ("internal", "vendor_track"),
        }
        assert seen["dtmf"] == 1  # the digit reached the caller leg's DTMF tracker
        assert wait_for(lambda: call.call_id not in bridge.calls())
        good, bad, _ = bit_exact(bridge.sink.captured(legs["caller"]), caller)
        assert bad == 0 and good >= 70, (good, bad)  # 80 frames, less the buffer's start
        good, bad, _ = bit_exact(bridge.sink.captured(legs["callee"]), callee)
        assert bad == 0 and good >= 70, (good, bad)
        stats = adapter_stats(bridge, "audio_fork")
        assert stats["events"] == {"metadata": 1, "dtmf": 1, "mark": 1, "unknown": 1}
        assert stats["bad"] == {"unknown_event": 1, "bad_json": 1}
        assert stats["dtmf_events"] == 1 and stats["calls_started"] == 1
        assert stats["calls_ended"] == {"disconnected": 1}
        assert wait_for(lambda: not bridge.calls())  # the ended call's tail played out
        assert [e.event for e in bridge.publisher.of(call.call_id)] == ["started", "ended"]
    finally:
        bridge.stop()


def test_mod_audio_fork_16k_mono_from_the_url(shared_dir: Path) -> None:
    """uuid_audio_fork says rate and mix on its command line, so the URL carries them;
    its metadata is whatever string it was given (a JSON object here). Bearer auth, the
    drachtio subprotocol, and 16 kHz resampled by the native core to the 8 kHz leg."""
    speech = load_speech(shared_dir, 1.6, skip=30)
    wide = np.clip(resample_poly(speech.astype(np.float64), 2, 1), -32768, 32767)
    bridge = _bridge()
    try:

        async def run() -> None:
            async with websockets.connect(
                _uri(bridge, "?rate=16000&mix=mono&role=external"),
                subprotocols=["audio.drachtio.org"],
                additional_headers=BEARER,
            ) as ws:
                await ws.send(json.dumps({"uuid": "5f1e-fs-uuid", "agent": "1001"}))
                await _stream(ws, wide.astype(np.int16)[:, None], 2 * FRAME)

        asyncio.run(run())
        events = [e for e, _ in bridge.publisher.events]
        call = events[0]
        assert call.external_ids == {"freeswitch": "5f1e-fs-uuid"}
        assert list(call.legs.values()) == ["external"]
        assert wait_for(lambda: not bridge.calls())
        cap = bridge.sink.captured(next(iter(call.legs)))
        got = np.concatenate([cap.by_rtp_ts[ts] for ts in sorted(cap.by_rtp_ts)])
        assert got.size >= speech.size * 0.8
        ref, window = speech.astype(np.float64), got[1600:9600].astype(np.float64)
        corr = max(
            float(np.corrcoef(ref[lag : lag + window.size], window)[0, 1])
            for lag in range(1200, 2000)
        )
        assert corr > 0.99, corr
        snapshot = bridge.publisher.events[0][1]
        assert snapshot.kind == "audio_fork"
        assert [(leg.role.value, leg.role_source) for leg in snapshot.legs.values()] == [
            ("external", "metadata")
        ]
    finally:
        bridge.stop()


def test_metadata_names_the_tenant_and_junk_falls_back() -> None:
    """``tenant`` in jambonz's listen ``metadata``, in uuid_audio_fork's metadata object,
    or the URL's ``?tenant=``; a refused one (not a string, unknown) is counted and the
    call takes the DNIS mapping or the default; the stream is accepted either way."""
    bridge = _bridge(**TENANTS)
    try:

        async def opened(first: dict[str, Any], query: str = "") -> ClientConnection:
            jambonz = "callSid" in first
            ws = await websockets.connect(
                _uri(bridge, query),
                subprotocols=["audio.jambonz.org" if jambonz else "audio.drachtio.org"],
                additional_headers=BEARER,
            )
            await ws.send(json.dumps(first))
            return ws

        def call_id(sid: str) -> str:
            system = "freeswitch" if sid == "t-4" else "jambonz"
            assert wait_for(lambda: live_call(bridge, system, sid) is not None)
            call = live_call(bridge, system, sid)
            assert call is not None
            return call.call_id

        async def scenario() -> None:
            listen = {"sampleRate": 8000, "mixType": "mono", "to": "+18005550100"}
            ws = [
                await opened({**listen, "callSid": "t-1", "metadata": {"tenant": "Globex"}}),
                await opened({**listen, "callSid": "t-2"}, "?tenant=acme"),
                await opened({**listen, "callSid": "t-3", "metadata": {"tenant": ["acme"]}}),
                await opened({"uuid": "t-4", "to": "+4420", "tenant": "initech"}),
            ]
            ids = [call_id(f"t-{k}") for k in range(1, 5)]
            assert tenant_of(bridge, ids[0]) == ("globex", "audio_fork_metadata", "globex")
            assert tenant_of(bridge, ids[1]) == ("acme", "audio_fork_metadata", "acme")
            assert tenant_of(bridge, ids[2]) == ("globex", "dnis_prefix", "globex")
            assert tenant_of(bridge, ids[3]) == ("default", "default", "default")
            assert rejected(bridge) == {
                ("audio_fork_metadata", "malformed"): 1,
                ("audio_fork_metadata", "unknown"): 1,
            }
            for w in ws:
                await w.close()

        asyncio.run(asyncio.wait_for(scenario(), 30))
        assert wait_for(lambda: not bridge.calls())
    finally:
        bridge.stop()


def test_metadata_call_state_says_early() -> None:
    """``call_state`` in the listen metadata (jambonz) or the URL: ``early`` makes the call
    early media; a value that is not a string is counted and ignored."""
    bridge = _bridge()
    try:

        async def scenario() -> None:
            listen = {"sampleRate": 8000, "mixType": "mono", "to": "+18005550100"}
            sockets = []
            for sid, meta, query in (
                ("s-1", {"call_state": "Ringing"}, ""),
                ("s-2", {}, "?call_state=early"),
                ("s-3", {"call_state": 7}, ""),
            ):
                ws = await websockets.connect(
                    _uri(bridge, query),
                    subprotocols=["audio.jambonz.org"],
                    additional_headers=BEARER,
                )
                await ws.send(json.dumps({**listen, "callSid": sid, "metadata": meta}))
                sockets.append(ws)
            sids = ("s-1", "s-2", "s-3")
            assert wait_for(lambda: all(live_call(bridge, "jambonz", s) for s in sids))
            calls = [live_call(bridge, "jambonz", s) for s in sids]
            assert [c.early_media for c in calls if c is not None] == [True, True, False]
            for ws in sockets:
                await ws.close()

        asyncio.run(asyncio.wait_for(scenario(), 30))
        assert bridge.bridge.controller.call_states.snapshot() == {
            ("said", "audio_fork_metadata", "early"): 2,
            ("rejected", "audio_fork_metadata", "malformed"): 1,
        }
        assert wait_for(lambda: not bridge.calls())
    finally:
        bridge.stop()


def test_credentials_and_draining_refuse_the_upgrade() -> None:
    bridge = _bridge(retry_after_s=4)
    off = _bridge(audio_fork_token=None, audio_fork_basic_auth=None)
    try:

        async def run() -> None:
            uri = _uri(bridge)
            for headers in (
                {},
                {"Authorization": f"Bearer {TOKEN}x"},
                _basic("jambonz:wrong"),
                {"Authorization": "Basic !!!"},
                {"Authorization": f"Basic {TOKEN}"},
            ):
                assert await refused_status(uri, headers) == 403, headers
            assert await refused_status(_uri(off), BEARER) == 403
            bridge.loop.call_soon_threadsafe(setattr, bridge.bridge.controller, "draining", True)
            await asyncio.sleep(0.05)
            assert await refused_status(uri, BEARER) == 503

        asyncio.run(run())
        assert adapter_stats(bridge, "audio_fork")["refused"] == {"unauthorized": 5, "draining": 1}
        assert adapter_stats(off, "audio_fork")["refused"] == {"disabled": 1}
        assert bridge.calls() == {} and bridge.publisher.events == []
    finally:
        off.stop()
        bridge.stop()


async def _bad(uri: str, messages: list[str | bytes]) -> tuple[int, str]:
    async with websockets.connect(uri, additional_headers=BEARER) as ws:
        try:
            for message in messages:
                await ws.send(message)
        except websockets.ConnectionClosed:
            pass
        return await close_of(ws)


def test_malformed_streams_are_closed_while_another_call_flows(shared_dir: Path) -> None:
    speech = load_speech(shared_dir, 1.6, skip=20)
    meta = json.dumps({"callSid": "good", "sampleRate": 8000, "mixType": "mixed"})
    mono = json.dumps({"callSid": "bad", "sampleRate": 8000, "mixType": "mono"})
    stereo = json.dumps({"callSid": "bad", "sampleRate": 8000, "mixType": "stereo"})
    cases: dict[str, tuple[list[str | bytes], int]] = {
        "bad_metadata": (["{oops"], 1007),
        "audio_before_metadata": ([bytes(320)], 1002),
        "unsupported_rate": ([json.dumps({"sampleRate": 96000})], 1003),
        "unsupported_mix": ([json.dumps({"mixType": "quad"})], 1003),
        "odd_size": ([mono, bytes(321)], 1007),
        "stereo_misaligned": ([stereo, bytes(642)], 1007),
        "chunk_too_large": ([mono, bytes(20000)], 1009),
        "flood_media": ([mono, *[bytes(1600)] * 40], 1008),  # 4 s of audio at once
    }
    bridge = _bridge()
    try:

        async def run() -> dict[str, tuple[int, str]]:
            async with websockets.connect(_uri(bridge), additional_headers=_basic()) as ws:
                await ws.send(meta)
                await asyncio.sleep(0.2)
                names = list(cases)
                closes = await asyncio.gather(
                    *(_bad(_uri(bridge), cases[name][0]) for name in names)
                )
                await _stream(ws, speech[:, None], FRAME)
                return dict(zip(names, closes, strict=True))

        closes = asyncio.run(run())
        assert {name: code for name, (code, _) in closes.items()} == {
            name: code for name, (_, code) in cases.items()
        }
        assert "faster than real time" in closes["flood_media"][1]
        stats = adapter_stats(bridge, "audio_fork")
        assert stats["bad"] == dict.fromkeys(cases, 1)
        good = next(
            e for e, _ in bridge.publisher.events if e.external_ids == {"freeswitch": "good"}
        )
        assert list(good.legs.values()) == ["mixed"]
        assert wait_for(lambda: not bridge.calls())
        cap = bridge.sink.captured(next(iter(good.legs)))
        ok, wrong, _ = bit_exact(cap, speech)
        assert wrong == 0 and ok >= 70, (ok, wrong)
        ended = [e.reason for e, _ in bridge.publisher.events if e.event == "ended"]
        assert sorted(ended) == ["disconnected", *["protocol_error"] * 4]
    finally:
        bridge.stop()
