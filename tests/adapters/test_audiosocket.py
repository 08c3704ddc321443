"""Asterisk AudioSocket against a real bridge: calls registered through the control API
(``/v1/audiosocket/calls``), then TCP connections that send what Asterisk sends (the
byte layout of res_audiosocket: kind, 16-bit big-endian length, payload; UUID first,
20 ms slin frames, DTMF, error and hangup frames), paced in real time, with real speech.
The audio that reaches the frame sink is compared bit for bit with the source (L16 is
lossless), including an asymmetric waveform that a byte-order mistake would change.
Refusals (address, UUID, token) create no call; a malformed connection is closed and
counted by reason while another call keeps flowing untouched."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from math import gcd
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from scipy.signal import resample_poly

from sip_bridge.adapters.audiosocket import SLIN_RATES
from sip_bridge.adapters.pcm import native_l16_rates
from sip_bridge.sinks import CapturedLeg
from tests.adapters.tenant_checks import TENANTS, rejected, tenant_of
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

TOKEN = "audiosocket-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FRAME = 160  # 20 ms at 8 kHz, what Asterisk sends


def _frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack("!BH", kind, len(payload)) + payload


def _slin(pcm: npt.NDArray[np.int16]) -> bytes:
    return pcm.astype("<i2").tobytes()


def _bridge(**settings: Any) -> RunningBridge:
    values: dict[str, Any] = {
        "control_api_token": TOKEN,
        "audiosocket_listen": "127.0.0.1:0",
        "audiosocket_allow": "127.0.0.1/32, ::1",
        **settings,
    }
    bridge = RunningBridge(**values)
    bridge.start()
    return bridge


def _api(bridge: RunningBridge) -> httpx.Client:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return httpx.Client(base_url=f"http://{host}:{port}", headers=AUTH, timeout=5)


def _port(bridge: RunningBridge) -> int:
    assert bridge.bridge.audiosocket is not None
    return bridge.bridge.audiosocket.address[1]


def _stats(bridge: RunningBridge) -> dict[str, Any]:
    assert bridge.bridge.audiosocket is not None
    return bridge.on_loop(bridge.bridge.audiosocket.snapshot)


async def _send(
    port: int,
    leg_uuid: uuid.UUID,
    pcm: npt.NDArray[np.int16],
    *,
    middle: bytes = b"",
    hangup: bool = True,
    source: str = "127.0.0.1",
    kind: int = 0x10,
    samples: int = FRAME,
) -> None:
    """What Asterisk sends: the UUID, 20 ms slin frames in real time (``middle``
    frames injected halfway), then a hangup frame."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(_frame(0x01, leg_uuid.bytes))
    t0 = time.monotonic()
    frames = pcm.size // samples
    for k in range(frames):
        delay = t0 + k * 0.02 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if k == frames // 2 and middle:
            writer.write(middle)
        writer.write(_frame(kind, _slin(pcm[k * samples : (k + 1) * samples])))
        await writer.drain()
    if hangup:
        writer.write(_frame(0x00))
    await writer.drain()
    writer.close()
    await writer.wait_closed()


def _aligned(cap: CapturedLeg, source: npt.NDArray[np.int16]) -> tuple[int, int]:
    """(frames equal to the source, frames differing) once the capture is placed on
    the source's timeline (AudioSocket has no timestamps: the bridge's RTP clock starts
    at a random value, so the first frame's offset in the source is searched for)."""
    assert cap.by_rtp_ts, "no audio reached the sink"
    first = min(cap.by_rtp_ts)
    rel = {(ts - first) & 0xFFFFFFFF: pcm for ts, pcm in cap.by_rtp_ts.items()}
    best = (0, len(rel))
    for base in range(0, 4000, 80):  # packets are cut at 10 ms units
        good = sum(
            1
            for off, pcm in rel.items()
            if np.array_equal(source[base + off : base + off + pcm.size], pcm)
        )
        best = max(best, (good, len(rel) - good))
    return best


def _register(api: httpx.Client, legs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    r = api.post("/v1/audiosocket/calls", json={"legs": legs, **extra})
    assert r.status_code == 201, r.text
    view: dict[str, Any] = r.json()
    return view


def test_asterisk_two_directions_one_call_bit_exact(shared_dir: Path) -> None:
    caller = load_speech(shared_dir, 2.0)
    # an asymmetric waveform: a byte-swapped stream would not reproduce it (and the
    # agent hangs up first, so the caller's plain close is what ends the call)
    agent = ((np.arange(int(1.6 * 8000)) * 2741) % 60000 - 27000).astype(np.int16)
    assert not np.array_equal(agent, agent.byteswap())
    bridge = _bridge()
    try:
        api = _api(bridge)
        given = uuid.uuid4()
        view = _register(
            api,
            [{"label": "caller", "role": "external", "uuid": str(given)}, {"role": "internal"}],
            ani="+15550123",
            dnis="8005550100",
            external_ids={"asterisk_linkedid": "1712345678.40"},
        )
        assert view["kind"] == "audiosocket" and view["sample_rates"] == list(native_l16_rates())
        assert view["audiosocket"]["port"] == _port(bridge)
        legs = {leg["label"]: leg for leg in view["legs"]}
        assert legs["caller"]["uuid"] == str(given) and legs["caller"]["state"] == "waiting"
        agent_uuid = uuid.UUID(legs["1"]["uuid"])
        call_id = view["call_id"]
        call = bridge.calls()[call_id]
        assert (call.kind, call.ani, call.dnis) == ("audiosocket", "+15550123", "8005550100")
        # mid-stream: a DTMF digit, an Asterisk error frame, a kind we do not know
        middle = _frame(0x03, b"7") + _frame(0xFF, b"\x02") + _frame(0x42, b"\x00" * 5)

        async def both() -> None:
            await asyncio.gather(
                _send(_port(bridge), given, caller, middle=middle, hangup=False),
                _send(_port(bridge), agent_uuid, agent, hangup=True),
            )

        asyncio.run(both())
        # the agent hung up, the caller's socket just closed: the call ends with both
        assert wait_for(lambda: call_id not in bridge.calls())
        good, bad = _aligned(bridge.sink.captured(legs["caller"]["leg_id"]), caller)
        assert bad == 0 and good >= 90, (good, bad)  # 100 frames, less the buffer's start
        good, bad = _aligned(bridge.sink.captured(legs["1"]["leg_id"]), agent)
        assert bad == 0 and good >= 70, (good, bad)
        events = [(e.event, e.reason) for e in bridge.publisher.of(call_id)]
        assert events == [("started", ""), ("ended", "closed")]
        started = bridge.publisher.of(call_id)[0]
        assert sorted(r.value for r in started.legs.values()) == ["external", "internal"]
        stats = _stats(bridge)
        assert stats["frames"]["uuid"] == 2 and stats["frames"]["audio"] == 180
        assert stats["dtmf_events"] == 1 and stats["error_codes"] == {"2": 1}
        assert stats["bad"] == {"unknown_kind": 1}
        assert stats["legs_ended"] == {"hangup": 1, "closed": 1}
        assert api.get(f"/v1/audiosocket/calls/{call_id}").status_code == 404
    finally:
        bridge.stop()


def test_dtmf_reaches_the_jitter_buffer_as_an_event_not_as_a_digit(shared_dir: Path) -> None:
    speech = load_speech(shared_dir, 1.2, skip=10)
    bridge = _bridge()
    try:
        api = _api(bridge)
        # a second leg that never connects keeps the call live after the first closes
        view = _register(api, [{"role": "external"}, {"role": "internal"}])
        leg_id, leg_uuid = view["legs"][0]["leg_id"], uuid.UUID(view["legs"][0]["uuid"])
        digits = _frame(0x03, b"5") + _frame(0x03, b"#") + _frame(0x03, b"x")
        asyncio.run(_send(_port(bridge), leg_uuid, speech, middle=digits, hangup=False))
        jb = bridge.bridge.media.stats(leg_id)
        assert jb["dtmf_events"] == 2 and jb["packets_dtmf"] >= 2
        assert jb["packets_lost"] == 0  # the audio sequence is untouched by the digits
        stats = _stats(bridge)
        assert stats["dtmf_events"] == 2 and stats["bad"] == {"bad_dtmf": 1}
        url = f"/v1/audiosocket/calls/{view['call_id']}"
        paused = api.patch(url, json={"paused": True})
        assert paused.status_code == 200 and all(leg["paused"] for leg in paused.json()["legs"])
        nope = api.patch("/v1/audiosocket/calls/call_nope", json={"paused": True})
        assert nope.status_code == 404
        assert api.delete(url).status_code == 204
        assert wait_for(lambda: not bridge.calls())  # the ended call's tail played out
        events = [(e.event, e.reason) for e in bridge.publisher.of(view["call_id"])]
        assert events == [("started", ""), ("held", "api"), ("ended", "api")]
    finally:
        bridge.stop()


def _refused(port: int, data: bytes, source: str = "127.0.0.1") -> bytes:
    """Connect, send ``data``, and return what comes back before the bridge closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            return s.recv(100)
        except OSError:  # reset before we finished: it refused
            return b""


def test_only_registered_uuids_from_allowlisted_addresses(shared_dir: Path) -> None:
    bridge = _bridge(retry_after_s=9)
    try:
        api = _api(bridge)
        port = _port(bridge)
        view = _register(api, [{"role": "external"}])
        registered = uuid.UUID(view["legs"][0]["uuid"])
        hello = _frame(0x01, registered.bytes) + _frame(0x10, b"\x00" * 320)
        # an address outside the allowlist, with a registered UUID: closed
        assert _refused(port, hello, source="127.0.0.2") == b""
        # a UUID nobody registered; audio before any UUID; a short UUID frame
        assert _refused(port, _frame(0x01, uuid.uuid4().bytes) + _frame(0x10, bytes(320))) == b""
        assert _refused(port, _frame(0x10, bytes(320))) == b""
        assert _refused(port, _frame(0x01, b"\x01" * 8)) == b""
        stats = _stats(bridge)
        assert stats["refused"] == {"address": 1, "unknown_uuid": 1}
        assert stats["bad"] == {"no_uuid": 2}
        assert list(bridge.calls()) == [view["call_id"]]  # no call was created
        assert bridge.sink.captured(view["legs"][0]["leg_id"]).by_rtp_ts == {}
        # the registration itself needs the control API token
        anon = httpx.post(api.base_url.join("/v1/audiosocket/calls"), json={"legs": [{}]})
        assert anon.status_code == 401
        bad = api.post("/v1/audiosocket/calls", json={"legs": [{"uuid": "not-a-uuid"}]})
        assert bad.status_code == 422
        taken = api.post("/v1/audiosocket/calls", json={"legs": [{"uuid": str(registered)}]})
        assert taken.status_code == 409
        # the registered UUID from an allowed address works once; a second one is refused
        speech = load_speech(shared_dir, 0.4)

        async def twice() -> None:
            first = asyncio.create_task(_send(port, registered, speech))
            await asyncio.sleep(0.15)
            assert await asyncio.to_thread(_refused, port, _frame(0x01, registered.bytes)) == b""
            await first

        asyncio.run(twice())
        assert wait_for(lambda: view["call_id"] not in bridge.calls())
        assert _stats(bridge)["refused"]["uuid_in_use"] == 1
        assert _refused(port, _frame(0x01, registered.bytes)) == b""  # the call ended
        # draining: no new registrations
        bridge.loop.call_soon_threadsafe(setattr, bridge.bridge.controller, "draining", True)
        assert wait_for(lambda: bridge.bridge.controller.draining)
        r = api.post("/v1/audiosocket/calls", json={"legs": [{}]})
        assert r.status_code == 503 and r.headers["retry-after"] == "9"
    finally:
        bridge.stop()


def test_registration_names_the_tenant_and_junk_falls_back() -> None:
    """AudioSocket itself carries only the UUID: the tenant is the registration's
    ``tenant`` (origin ``api``, as POST /v1/calls), validated and counted the same way;
    a refused one gives the DNIS mapping and the registration still succeeds."""
    bridge = _bridge(**TENANTS)
    try:
        api = _api(bridge)
        given = _register(api, [{"role": "external"}], tenant="Acme", dnis="+18005550100")
        junk = _register(api, [{"role": "external"}], tenant="acme corp", dnis="+18005550100")
        assert (given["tenant"], given["tenant_source"]) == ("acme", "api")
        assert (junk["tenant"], junk["tenant_source"]) == ("globex", "dnis_prefix")
        assert tenant_of(bridge, given["call_id"]) == ("acme", "api", "acme")
        assert tenant_of(bridge, junk["call_id"]) == ("globex", "dnis_prefix", "globex")
        assert rejected(bridge) == {("api", "malformed"): 1}
        for view in (given, junk):
            assert api.delete(f"/v1/audiosocket/calls/{view['call_id']}").status_code == 204
        assert wait_for(lambda: not bridge.calls())
        ended = [e for e in bridge.publisher.of(given["call_id"]) if e.event == "ended"]
        assert [e.tenant for e in ended] == ["acme"]
    finally:
        bridge.stop()


def test_no_allowlist_means_nobody(shared_dir: Path) -> None:
    bridge = _bridge(audiosocket_allow="")
    try:
        view = _register(_api(bridge), [{"role": "external"}])
        registered = uuid.UUID(view["legs"][0]["uuid"])
        assert _refused(_port(bridge), _frame(0x01, registered.bytes)) == b""
        assert _stats(bridge)["refused"] == {"address": 1}
        url = f"/v1/audiosocket/calls/{view['call_id']}"
        assert _api(bridge).get(url).json()["legs"][0]["state"] == "waiting"
        assert _api(bridge).delete(url).status_code == 204
    finally:
        bridge.stop()


async def _malformed(port: int, leg_uuid: uuid.UUID, body: bytes, stall: bool = False) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_frame(0x01, leg_uuid.bytes) + body)
    try:
        await writer.drain()
        if not stall:
            writer.write_eof()
        await reader.read()  # until the bridge closes
    except ConnectionError:  # reset: the bridge closed with our bytes unread
        pass
    writer.close()


def test_malformed_sessions_are_closed_while_another_call_flows(shared_dir: Path) -> None:
    speech = load_speech(shared_dir, 2.0, skip=20)
    bridge = _bridge(rtp_timeout_s=1.0)
    try:
        api = _api(bridge)
        port = _port(bridge)
        good = _register(api, [{"label": "caller", "role": "external"}])
        cases: dict[str, bytes] = {
            "oversized": struct.pack("!BH", 0x10, 40000) + bytes(100),
            "truncated": _frame(0x10, bytes(320))[:200],
            "bad_size": _frame(0x10, bytes(321)),
            "flood": b"".join(_frame(0x10, bytes(320)) for _ in range(150)),  # 3 s at once
            "slow": struct.pack("!BH", 0x10, 320) + bytes(10),  # then nothing
        }
        refused = [k for k, rate in SLIN_RATES.items() if rate not in native_l16_rates()]
        cases["unsupported_rate"] = _frame(refused[0], bytes(640))  # e.g. 44.1 kHz
        bad = _register(api, [{"label": name} for name in cases])
        bad_uuids = {leg["label"]: uuid.UUID(leg["uuid"]) for leg in bad["legs"]}

        async def run() -> None:
            flowing = asyncio.create_task(
                _send(port, uuid.UUID(good["legs"][0]["uuid"]), speech, hangup=True)
            )
            await asyncio.sleep(0.2)
            await asyncio.gather(
                *(
                    _malformed(port, bad_uuids[name], body, stall=name == "slow")
                    for name, body in cases.items()
                )
            )
            await flowing

        asyncio.run(run())
        assert wait_for(lambda: _stats(bridge)["legs_ended"].get("hangup") == 1)
        stats = _stats(bridge)
        assert {k: stats["bad"].get(k, 0) for k in cases} == dict.fromkeys(cases, 1)
        ok, wrong = _aligned(bridge.sink.captured(good["legs"][0]["leg_id"]), speech)
        assert wrong == 0 and ok >= 90, (ok, wrong)
        assert wait_for(lambda: not bridge.calls())
        assert [e.reason for e in bridge.publisher.of(good["call_id"])] == ["", "hangup"]
        ended = [e for e in bridge.publisher.of(bad["call_id"]) if e.event == "ended"]
        assert len(ended) == 1  # the last malformed leg to close ended that call
    finally:
        bridge.stop()


@pytest.mark.parametrize(("kind", "rate"), [(0x12, 16000), (0x15, 44100)])
def test_slin16_is_resampled_to_the_detector_rate(shared_dir: Path, kind: int, rate: int) -> None:
    """Kind 0x12 (16 kHz) and 0x15 (44.1 kHz, 2.5 ms units of 110 or 111 samples) reach
    the 8 kHz leg through the native resampler: not bit exact, but the same speech (the
    stream is the 8 kHz source upsampled)."""
    assert rate in native_l16_rates()
    up = rate // gcd(rate, 8000)
    speech = load_speech(shared_dir, 1.6, skip=30)
    wide = np.clip(
        resample_poly(speech.astype(np.float64), up, 8000 // gcd(rate, 8000)), -32768, 32767
    )
    bridge = _bridge()
    try:
        view = _register(_api(bridge), [{"role": "external"}])
        leg = view["legs"][0]
        asyncio.run(
            _send(
                _port(bridge),
                uuid.UUID(leg["uuid"]),
                wide.astype(np.int16),
                kind=kind,
                samples=rate // 50,
            )
        )
        assert wait_for(lambda: view["call_id"] not in bridge.calls())
        cap = bridge.sink.captured(leg["leg_id"])  # keyed by the stream's own clock
        assert np.diff(sorted(cap.by_rtp_ts)).min() == rate // 50  # 8 kHz frames of 20 ms
        got = np.concatenate([cap.by_rtp_ts[ts] for ts in sorted(cap.by_rtp_ts)])
        assert got.size >= speech.size * 0.8
        ref, window = speech.astype(np.float64), got[1600:9600].astype(np.float64)
        corr = max(
            float(np.corrcoef(ref[lag : lag + window.size], window)[0, 1])
            for lag in range(1200, 2000)  # the first frames are the buffer's start
        )
        assert corr > 0.99, corr
        assert _stats(bridge)["bad"] == {}
    finally:
        bridge.stop()
