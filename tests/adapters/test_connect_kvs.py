"""Amazon Connect live media (Kinesis Video Streams) against a real bridge: the control
API starts monitoring a contact (``POST /v1/connect/contacts``), the bridge reads the
contact's recorded GetMedia body from its capture directory, and the audio that reaches
the frame sink is compared bit for bit with the speech the fixture was built from, at
the sample offsets its timecodes give (both legs on one timeline).

The fixture is built here (tests/adapters/kvs_fixture.py): real speech written by
libavformat's Matroska muxer through PyAV, read back, and cut into KVS fragments with
Connect's tracks and tags, a fragment of the stream's previous contact before the start
fragment, a 100 ms gap, two reordered blocks and a duplicate. Malformed streams
(truncated, an oversized element, an invalid ID, garbage, a MimeType tag that is not
L16, the stream moving on to another contact) end only their own contact, counted, while
the good one plays on; well-formed unknown elements are skipped and counted."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from sip_bridge.calls import Call
from tests.adapters.kvs_fixture import (
    AGENT,
    CUSTOMER,
    KvsBlock,
    demux_blocks,
    el,
    fragments_of,
    kvs_stream,
    write_two_track_mkv,
)
from tests.adapters.tenant_checks import TENANTS, rejected
from tests.adapters.ws_vendor import adapter_stats, bit_exact, overlapping
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

TOKEN = "connect-control-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PATH = "/v1/connect/contacts"
FIRST = 91343852333181531502161607852955530730504675150  # the fixture's first fragment
SECOND = 8000  # samples
GAP = (12000, 12800)  # customer samples never sent (100 ms at 1.5 s)
AGENT_START = 1600  # the agent track starts 200 ms in


@dataclasses.dataclass
class Speech:
    customer: npt.NDArray[np.int16]
    agent: npt.NDArray[np.int16]
    blocks: list[KvsBlock]  # as libavformat demuxed them


@pytest.fixture(scope="module")
def speech(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Speech:
    customer = load_speech(shared_dir, 3.0)
    agent = load_speech(shared_dir, 3.0, skip=25)
    path = tmp_path_factory.mktemp("mkv") / "contact.mkv"
    write_two_track_mkv(path, customer, agent)
    return Speech(customer, agent, demux_blocks(path))


def _contact_blocks(speech: Speech) -> list[KvsBlock]:
    """Stream order with the impairments: gap, two customer blocks swapped, a duplicate."""
    out: list[KvsBlock] = []
    for b in speech.blocks:
        if b.track == CUSTOMER and GAP[0] <= b.offset < GAP[1]:
            continue
        if b.track == AGENT and b.offset < AGENT_START:
            continue
        out.append(b)
        if b.track == AGENT and b.offset == 8000:
            out.append(b)  # sent twice
    i = next(k for k, b in enumerate(out) if b.track == CUSTOMER and b.offset == 4000)
    j = next(k for k, b in enumerate(out) if b.track == CUSTOMER and b.offset == 4160)
    out[i], out[j] = out[j], out[i]  # 4160 arrives before 4000
    return out


def _previous_contact() -> list[KvsBlock]:
    """A fragment of the contact that used the stream before ours (before start)."""
    noise = (np.arange(160) * 977 % 20000 - 10000).astype("<i2").tobytes()
    return [KvsBlock(CUSTOMER, off, noise) for off in range(-SECOND, 0, 160)]


def _stream(fragments: list[list[Any]], contact: str, **kw: Any) -> bytes:
    ids = kw.pop("contact_ids", None) or ["previous-contact"] + [contact] * (len(fragments) - 1)
    return kvs_stream(fragments, contact_id=contact, contact_ids=ids, **kw)


def _api(bridge: RunningBridge) -> str:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return f"http://{host}:{port}{PATH}"


def _start(client: httpx.Client, url: str, contact: str, arn: str, **extra: Any) -> Any:
    body = {"contact_id": contact, "stream_arn": arn, "start_fragment": str(FIRST + 1), **extra}
    return client.post(url, json=body, headers=AUTH)


def _ended(bridge: RunningBridge, call_id: str) -> str | None:
    for event, _ in bridge.publisher.events:
        if event.call_id == call_id and event.event == "ended":
            return event.reason
    return None


def _call(bridge: RunningBridge, call_id: str) -> Call:
    return next(c for e, c in bridge.publisher.events if e.call_id == call_id)


def test_connect_contact_two_legs_bit_exact_and_faults_stay_local(
    speech: Speech, tmp_path: Path
) -> None:
    good = fragments_of(_contact_blocks(speech), SECOND)
    (tmp_path / "connect-live-1.mkv").write_bytes(_stream([_previous_contact(), *good], "c-good"))
    short = [f[:20] for f in good[:2]]
    bad_id = _stream([_previous_contact(), short[0], [*short[1], b"\x00\x81\x00"]], "c-bad-id")
    huge = bytes.fromhex("a3") + bytes.fromhex("0100001000000000")
    oversized = _stream([_previous_contact(), short[0], [*short[1][:5], huge]], "c-huge")
    truncated = _stream([_previous_contact(), *short], "c-cut")
    odd = el(0x7E5B, b"\x01" * 30)  # a well-formed element nobody defines
    unknown = _stream([_previous_contact(), *([*f, odd] for f in short)], "c-odd")
    moved = _stream(
        [_previous_contact(), *short, short[1]],
        "c-moved",
        contact_ids=["previous-contact", "c-moved", "c-moved", "the-next-contact"],
    )
    captures = {
        "c-bad-id": bad_id,
        "c-huge": oversized,
        "c-cut": truncated[: len(truncated) - len(truncated) // 4],
        "c-odd": unknown,
        "c-moved": moved,
        "c-garbage": b"\x42\x86\x81\x01" + bad_id,  # not starting with an EBML header
        # Connect's A_AAC tracks taken as PCM until the MimeType tag says otherwise
        "c-mulaw": _stream([_previous_contact(), *short], "c-mulaw", mime="audio/PCMU;rate=8000"),
    }
    for name, data in captures.items():
        (tmp_path / "faults" / f"{name}.mkv").parent.mkdir(exist_ok=True)
        (tmp_path / "faults" / f"{name}.mkv").write_bytes(data)

    bridge = RunningBridge(control_api_token=TOKEN, connect_media_dir=str(tmp_path))
    bridge.start()
    try:
        url = _api(bridge)
        with httpx.Client(timeout=5) as client:
            arn = "arn:aws:kinesisvideo:eu-west-2:111111111111:stream/connect-live-1/1571360125131"
            instance = "arn:aws:connect:eu-west-2:111111111111:instance/d5b716a2-10bb"
            r = _start(
                client, url, "c-good", arn, instance_id=instance, initial_contact_id="c-first"
            )
            assert r.status_code == 201, r.text
            view = r.json()
            calls = {
                name: _start(client, url, name, f"file:faults/{name}.mkv").json()["call_id"]
                for name in captures
            }
            # while they run: the API's answers
            assert _start(client, url, "c-good", arn).status_code == 409
            assert _start(client, url, "c-x", "missing.mkv").status_code == 404
            assert _start(client, url, "c-x", "../outside.mkv").status_code == 400
            assert _start(client, url, "c-x", "arn:aws:s3:::bucket/key").status_code == 400
            bad_body = {"contact_id": "bad id!", "stream_arn": arn}
            assert client.post(url, json=bad_body, headers=AUTH).status_code == 422
            wrong = {"Authorization": "Bearer nope"}
            assert client.post(url, json={}, headers=wrong).status_code == 401
            listed = client.get(url, headers=AUTH).json()
            assert "c-good" in {c["contact_id"] for c in listed}
            assert client.get(f"{url}/c-good", headers=AUTH).json()["call_id"] == view["call_id"]
            assert client.get(f"{url}/nobody", headers=AUTH).status_code == 404
        call_id = view["call_id"]
        assert view["external_ids"] == {
            "connect": "c-good",
            "connect_instance": "d5b716a2-10bb",
            "connect_initial": "c-first",
        }
        assert view["correlation_id"] == "c-first"
        assert {(leg["label"], leg["track"], leg["role"]) for leg in view["legs"]} == {
            ("customer", CUSTOMER, "external"),
            ("agent", AGENT, "internal"),
        }
        assert wait_for(lambda: _ended(bridge, call_id) is not None, 10)
        assert wait_for(lambda: all(_ended(bridge, c) for c in calls.values()), 5)

        call = _call(bridge, call_id)
        legs = {leg.label: leg for leg in call.legs.values()}
        assert {k: (v.role.value, v.role_source) for k, v in legs.items()} == {
            "customer": ("external", "vendor_track"),
            "agent": ("internal", "vendor_track"),
        }
        cap_c = bridge.sink.captured(legs["customer"].leg_id)
        cap_a = bridge.sink.captured(legs["agent"].leg_id)
        good_c, bad_c, origin_c = bit_exact(cap_c, speech.customer)
        good_a, bad_a, origin_a = bit_exact(cap_a, speech.agent)
        assert bad_c == 0 and good_c >= 130, (good_c, bad_c)  # 150 frames, less the gap
        assert bad_a == 0 and good_a >= 120, (good_a, bad_a)
        assert origin_a == origin_c  # one timeline: the agent's first block sits at 200 ms
        assert overlapping(cap_c, origin_c, *GAP) == []  # the gap stayed a gap
        assert overlapping(cap_a, origin_a, 0, AGENT_START) == []
        assert overlapping(cap_c, origin_c, 3900, 4400) != []  # reordered, still placed
        assert [e.event for e in bridge.publisher.of(call_id)] == ["started", "ended"]
        assert _ended(bridge, call_id) == "end_of_stream"

        ended = {name: _ended(bridge, c) for name, c in calls.items()}
        assert ended == {
            "c-bad-id": "bad_media",
            "c-huge": "bad_media",
            "c-cut": "bad_media",
            "c-odd": "end_of_stream",
            "c-moved": "contact_changed",
            "c-garbage": "bad_media",
            "c-mulaw": "bad_media",
        }
        stats = adapter_stats(bridge, "connect")
        assert stats["bad"] == {
            "bad_id": 1,
            "oversized": 1,
            "truncated": 1,
            "unexpected_element": 1,
            "unsupported_format": 1,
        }
        assert stats["events"]["unknown_element"] == 2
        # one fragment of each stream's previous contact (garbage has none)
        assert stats["events"]["fragment_skipped"] == 7
        assert stats["calls_started"] == 8
        assert stats["calls_ended"] == {"end_of_stream": 2, "bad_media": 5, "contact_changed": 1}
        assert stats["refused"] == {"contact_in_use": 1, "source_404": 1, "source_400": 2}
    finally:
        bridge.stop()


def test_a_plain_matroska_file_and_the_call_lifecycle(speech: Speech, tmp_path: Path) -> None:
    """libavformat's own file (A_PCM/INT/LIT tracks, no Connect tags, no fragments) is
    read the same way; DELETE stops a contact; draining refuses new ones; an adapter
    without a media source is off."""
    path = tmp_path / "plain.mkv"
    write_two_track_mkv(path, speech.customer[:12000], speech.agent[:12000])
    bridge = RunningBridge(control_api_token=TOKEN, connect_media_dir=str(tmp_path))
    off = RunningBridge(control_api_token=TOKEN)
    bridge.start()
    off.start()
    try:
        url = _api(bridge)
        with httpx.Client(timeout=5) as client:
            plain = client.post(
                url, json={"contact_id": "c-plain", "stream_arn": "plain.mkv"}, headers=AUTH
            )
            assert plain.status_code == 201, plain.text
            stopped = client.post(
                url, json={"contact_id": "c-stop", "stream_arn": "plain.mkv"}, headers=AUTH
            )
            time.sleep(0.5)
            assert client.delete(f"{url}/c-stop", headers=AUTH).status_code == 204
            assert client.delete(f"{url}/c-stop", headers=AUTH).status_code == 404
            bridge.on_loop(lambda: setattr(bridge.bridge.controller, "draining", True))
            body = {"contact_id": "c-late", "stream_arn": "plain.mkv"}
            assert client.post(url, json=body, headers=AUTH).status_code == 503
            bridge.on_loop(lambda: setattr(bridge.bridge.controller, "draining", False))
            r = client.post(_api(off), json=body, headers=AUTH)
            assert r.status_code == 403 and "no media source" in r.text
        stop_id = stopped.json()["call_id"]
        assert wait_for(lambda: _ended(bridge, stop_id) == "api")
        call_id = plain.json()["call_id"]
        assert wait_for(lambda: _ended(bridge, call_id) == "end_of_stream", 5)
        legs = {leg.label: leg.leg_id for leg in _call(bridge, call_id).legs.values()}
        for label, pcm in (("customer", speech.customer[:12000]), ("agent", speech.agent[:12000])):
            good, bad, _ = bit_exact(bridge.sink.captured(legs[label]), pcm)
            # 75 frames sent; alone, all 75 arrive bit-exact (the call ends after its
            # buffered tail has played out). The reader paces blocks on the event loop,
            # and on a loaded box frames went missing (51 and 63 in two full runs on
            # 2026-12-02), never wrong ones. Exactness stays strict.
            assert bad == 0 and good >= 45, (label, good, bad)
        assert adapter_stats(bridge, "connect")["calls_ended"] == {"end_of_stream": 1, "api": 1}
        # end-of-stream came right after the last block: both legs played it out first
        # (c-stop's two legs too, unless their buffers were empty at the DELETE)
        assert bridge.on_loop(bridge.bridge.ingest_counters)["drained_legs"] >= 2
    finally:
        off.stop()
        bridge.stop()


def test_contact_tenant_is_the_calls_and_junk_falls_back(speech: Speech, tmp_path: Path) -> None:
    """The Lambda passes the contact attribute callshield_tenant as ``tenant``: a known id
    is the call's tenant (origin connect_request); an unknown one is counted and the call
    takes the DNIS mapping; the contact is monitored either way (201)."""
    path = tmp_path / "plain.mkv"
    write_two_track_mkv(path, speech.customer[:4000], speech.agent[:4000])
    bridge = RunningBridge(control_api_token=TOKEN, connect_media_dir=str(tmp_path), **TENANTS)
    bridge.start()
    try:
        url = _api(bridge)
        views = []
        with httpx.Client(timeout=5) as client:
            for contact, tenant in (("c-acme", "Acme"), ("c-junk", "initech")):
                body = {
                    "contact_id": contact,
                    "stream_arn": "plain.mkv",
                    "dnis": "+18005550100",
                    "tenant": tenant,
                }
                r = client.post(url, json=body, headers=AUTH)
                assert r.status_code == 201, r.text
                views.append(r.json())
        assert [(v["tenant"], v["tenant_source"]) for v in views] == [
            ("acme", "connect_request"),
            ("globex", "dnis_prefix"),
        ]
        for view, tenant in zip(views, ("acme", "globex"), strict=True):
            events = bridge.publisher.of(view["call_id"])
            assert events and {e.tenant for e in events} == {tenant}
        assert rejected(bridge) == {("connect_request", "unknown"): 1}
        assert wait_for(lambda: not bridge.calls(), 5)
    finally:
        bridge.stop()
