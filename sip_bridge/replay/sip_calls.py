"""A capture holding several calls: SIP grouped by Call-ID, RTP tied to calls by SDP.

Every SIP message over UDP in the capture is parsed and grouped by its Call-ID. Each SDP
body (offer, answer, re-INVITE, UPDATE, and the SDP part of a multipart body) announces
where its sender receives RTP: the ``c=`` address and ``m=`` port of each audio line,
from the message's capture time on. The sender is a *party* of the dialog: the From tag
of a request, the To tag of a response.

An RTP stream (one SSRC from one source to one destination) belongs to the call whose
SDP most recently announced its destination (up to ``SLACK_NS`` after the stream began:
capture clocks and early media), or else its source (symmetric RTP). Streams are
grouped into legs by who receives them: (receiving party, m-line index), so a re-INVITE
that moves the media to a new port, or a new SSRC, continues the same leg, and the two
m-lines of a SIPREC session stay two legs. A destination reused by a later call is
told apart by time; two calls using the same SSRC are told apart by address.

Roles, unless ``--external-ssrc``/``--internal-ssrc`` name a stream of the leg: the
audio the caller sends (received by the party that answered the first INVITE) is
external, the other leg internal; with one receiving party (SIPREC), the first m-line
is external and the second internal. A call's third and later legs, and streams no
SDP explains, are reported as unassociated, never dropped silently. SIP over TCP/TLS is
not reassembled from captures: a capture whose signalling is not over UDP falls back
to SSRC grouping (``sources.read_capture``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from detectors.alert_schema import LegRole
from native.jitter import DEFAULT_PAYLOAD_TYPES, PayloadType
from sip_bridge.replay.pcap import CaptureStats, Datagram, read_udp
from sip_bridge.replay.sources import (
    MIN_PACKETS,
    LegTrack,
    Recording,
    ReplayInputError,
    payload_types_of,
    rtp_ssrc,
)
from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.identity import CallerIdentity, caller_identity
from sip_bridge.sip.message import SipMessage, SipParseError, SipRequest, parse_message
from sip_bridge.sip.multipart import ContentType, Multipart
from sip_bridge.sip.sdp import SessionDescription

SLACK_NS = 1_000_000_000
_METHODS = tuple(
    m.encode() + b" "
    for m in [
        "INVITE",
        "ACK",
        "BYE",
        "CANCEL",
        "UPDATE",
        "OPTIONS",
        "PRACK",
        "INFO",
        "NOTIFY",
        "REFER",
        "MESSAGE",
        "SUBSCRIBE",
        "REGISTER",
        "PUBLISH",
    ]
)

Endpoint = tuple[str, int]
LegKey = tuple[str, int]  # (receiving party, m-line index)


@dataclass(frozen=True, slots=True)
class Unassociated:
    """An RTP stream the report shows but no call's analysis used, and why."""

    ssrc: int
    src: Endpoint
    dst: Endpoint
    packets: int
    first_s: float  # seconds from the capture's first packet
    reason: str
    sip_call_id: str = ""


@dataclass(slots=True)
class CaptureCalls:
    """The calls found in a capture (one recording each, in order of their first SIP
    message), the calls whose SDP no RTP matched, and the streams left over."""

    path: Path
    calls: list[Recording]
    without_media: list[str]
    unassociated: list[Unassociated]
    skipped: dict[str, int]


@dataclass(slots=True)
class _Leg:
    packets: list[tuple[int, bytes]] = field(default_factory=list)
    streams: dict[tuple[int, Endpoint, Endpoint], int] = field(default_factory=dict)


@dataclass(slots=True)
class _Call:
    call_id: str
    first_ns: int
    caller: str = ""  # the From tag of the first INVITE
    answerer: str = ""  # the To tag of the first 2xx/18x with SDP to it
    payload_types: dict[int, PayloadType] = field(default_factory=dict)
    has_sdp: bool = False
    legs: dict[LegKey, _Leg] = field(default_factory=dict)
    identity: CallerIdentity | None = None
    ani: str = ""


def _norm(address: str) -> str:
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address.lower()


def _is_sip(payload: bytes) -> bool:
    return payload.startswith(b"SIP/2.0 ") or payload.startswith(_METHODS)


def _sdp(msg: SipMessage) -> SessionDescription | None:
    if not msg.body:
        return None
    try:
        ctype = ContentType.parse(msg.headers.get("Content-Type") or "application/sdp")
        raw: bytes | None = msg.body
        if ctype.mime == "multipart/mixed":
            part = Multipart.parse(msg.body, ctype).find("application/sdp")
            raw = part.body if part is not None else None
        elif ctype.mime != "application/sdp":
            raw = None
        return SessionDescription.parse(raw) if raw else None
    except ValueError:  # SipParseError is one
        return None


def _tag(msg: SipMessage, header: str) -> str:
    value = msg.headers.get(header)
    if value is None:
        return ""
    try:
        return NameAddr.parse(value).tag or ""
    except SipParseError:
        return ""


class _Index:
    """Endpoint -> [(announced at, call id, party, m-line index)], in capture order."""

    def __init__(self) -> None:
        self.by_endpoint: dict[Endpoint, list[tuple[int, str, str, int]]] = {}

    def announce(self, t: int, call_id: str, party: str, sdp: SessionDescription) -> None:
        for i, m in enumerate(sdp.media):
            if m.media != "audio" or m.port == 0:
                continue
            try:
                address = sdp.media_connection(m)
            except ValueError:
                continue
            if not address or address in ("0.0.0.0", "::"):
                continue  # RFC 2543 hold: no address to receive on
            entries = self.by_endpoint.setdefault((_norm(address), m.port), [])
            entries.append((t, call_id, party, i))

    def lookup(self, endpoint: Endpoint, t: int) -> tuple[str, str, int] | None:
        """The latest announcement of ``endpoint`` made before ``t`` (+ slack)."""
        best = None
        for at, call_id, party, index in self.by_endpoint.get(endpoint, ()):
            if at <= t + SLACK_NS:
                best = (call_id, party, index)
        return best


def read_capture_calls(
    path: Path, external_ssrc: int | None = None, internal_ssrc: int | None = None
) -> CaptureCalls | None:
    """The capture's calls, or None when it holds no SIP dialog with SDP (then the
    caller falls back to grouping RTP by SSRC)."""
    stats = CaptureStats()
    calls: dict[str, _Call] = {}
    index = _Index()
    rtp: list[tuple[Datagram, int]] = []
    skipped: dict[str, int] = {}
    t_first: int | None = None
    for d in read_udp(path, stats):
        t_first = d.time_ns if t_first is None else min(t_first, d.time_ns)
        ssrc = rtp_ssrc(d.payload)
        if ssrc is not None:
            rtp.append((d, ssrc))
        elif _is_sip(d.payload):
            _sip(d, calls, index, skipped)
        elif len(d.payload) >= 2 and d.payload[0] >> 6 == 2:
            skipped["RTCP"] = skipped.get("RTCP", 0) + 1
        else:
            skipped["other UDP"] = skipped.get("other UDP", 0) + 1
    if not index.by_endpoint:
        return None
    leftovers = _associate(rtp, calls, index)
    out = CaptureCalls(path, [], [], [], {**stats.skipped, **skipped})
    t0 = t_first or 0
    for call in sorted(calls.values(), key=lambda c: c.first_ns):
        legs = {k: leg for k, leg in call.legs.items() if len(leg.packets) >= MIN_PACKETS}
        short = sum(len(leg.packets) for k, leg in call.legs.items() if k not in legs)
        if short:
            out.skipped["RTP of streams too short to be a leg"] = short
        if not legs:
            if call.has_sdp:
                out.without_media.append(call.call_id)
            continue
        recording, extra = _recording(path, call, legs, external_ssrc, internal_ssrc)
        out.calls.append(recording)
        for leg in extra:
            out.unassociated += _unassociated(
                leg, t0, "a third leg of the call: only two are analysed", call.call_id
            )
    for leg in leftovers.values():
        out.unassociated += _unassociated(leg, t0, "no SDP in the capture names its addresses")
    out.unassociated.sort(key=lambda u: (u.first_s, u.ssrc))
    if not out.calls and not out.unassociated:
        raise ReplayInputError(f"{path}: SIP calls but no RTP stream found")
    return out


def _sip(d: Datagram, calls: dict[str, _Call], index: _Index, skipped: dict[str, int]) -> None:
    try:
        msg = parse_message(d.payload)
    except (SipParseError, ValueError):
        skipped["malformed SIP"] = skipped.get("malformed SIP", 0) + 1
        return
    call_id = (msg.headers.get("Call-ID") or "").strip()
    if not call_id:
        skipped["malformed SIP"] = skipped.get("malformed SIP", 0) + 1
        return
    call = calls.setdefault(call_id, _Call(call_id, d.time_ns))
    request = isinstance(msg, SipRequest)
    if isinstance(msg, SipRequest) and msg.method == "INVITE" and not call.caller:
        call.caller = _tag(msg, "From")
        _caller_id(msg, call, d.time_ns)
    sdp = _sdp(msg)
    if sdp is None:
        return
    party = _tag(msg, "From") if request else _tag(msg, "To")
    if not request and not call.answerer and party and party != call.caller:
        call.answerer = party
    party = party or ("from" if request else "to")
    call.has_sdp = True
    for p in payload_types_of(sdp):
        call.payload_types.setdefault(p.pt, p)
    index.announce(d.time_ns, call_id, party, sdp)


def _associate(
    rtp: list[tuple[Datagram, int]], calls: dict[str, _Call], index: _Index
) -> dict[int, _Leg]:
    """Every RTP packet into its call's leg; what no SDP explains, by SSRC."""
    seen: dict[tuple[int, Endpoint, Endpoint], tuple[str, LegKey] | None] = {}
    leftovers: dict[int, _Leg] = {}
    for d, ssrc in rtp:
        src, dst = (_norm(d.src[0]), d.src[1]), (_norm(d.dst[0]), d.dst[1])
        key = (ssrc, src, dst)
        if key not in seen:
            seen[key] = _resolve(src, dst, d.time_ns, calls, index)
        where = seen[key]
        if where is None:
            leg = leftovers.setdefault(ssrc, _Leg())
        else:
            leg = calls[where[0]].legs.setdefault(where[1], _Leg())
        leg.streams[key] = leg.streams.get(key, 0) + 1
        leg.packets.append((d.time_ns, d.payload))
    return leftovers


def _resolve(
    src: Endpoint, dst: Endpoint, t: int, calls: dict[str, _Call], index: _Index
) -> tuple[str, LegKey] | None:
    hit = index.lookup(dst, t)
    if hit is not None:
        return hit[0], (hit[1], hit[2])
    hit = index.lookup(src, t)  # symmetric RTP: sent from where its sender receives
    if hit is None:
        return None
    call_id, sender, m = hit
    call = calls[call_id]
    others = {call.caller, call.answerer} - {sender, ""}
    receiver = others.pop() if len(others) == 1 else f"not {sender}"
    return call_id, (receiver, m)


def _caller_id(msg: SipRequest, call: _Call, time_ns: int) -> None:
    """The INVITE's caller identity, checked as of its capture time without a trust store
    (a wrong algorithm or a malformed PASSporT fails; a signature is not checked). A
    SIPREC INVITE (multipart body) is skipped: its From is the recording client's, and
    the caller is in its metadata (DESIGN: never the SBC's own From)."""
    if "multipart" in (msg.headers.get("Content-Type") or "").lower():
        return
    try:
        call.identity = caller_identity(msg.headers, request_uri=msg.uri, now=time_ns / 1e9)
    except (SipParseError, ValueError):
        return
    call.ani = call.identity.caller_number


def _recording(
    path: Path,
    call: _Call,
    legs: dict[LegKey, _Leg],
    external_ssrc: int | None,
    internal_ssrc: int | None,
) -> tuple[Recording, list[_Leg]]:
    def order(item: tuple[LegKey, _Leg]) -> tuple[int, int, int]:
        (receiver, m), leg = item
        to_answerer = receiver != call.caller  # what the caller says comes first
        return (0 if to_answerer else 1, m, min(t for t, _ in leg.packets))

    ordered = [leg for _, leg in sorted(legs.items(), key=order)]
    ssrcs = [{ssrc for ssrc, _, _ in leg.streams} for leg in ordered]
    for wanted, slot in ((external_ssrc, 0), (internal_ssrc, 1)):
        if wanted is None:
            continue
        hit = next((i for i, s in enumerate(ssrcs) if wanted in s), None)
        if hit is not None and hit != slot and len(ordered) > slot:
            ordered[slot], ordered[hit] = ordered[hit], ordered[slot]
            ssrcs[slot], ssrcs[hit] = ssrcs[hit], ssrcs[slot]
    chosen, extra = ordered[:2], ordered[2:]
    t0 = min(t for leg in chosen for t, _ in leg.packets)
    table = {p.pt: p for p in DEFAULT_PAYLOAD_TYPES}
    for pt, p in call.payload_types.items():
        table.setdefault(pt, p)
    tracks = []
    for leg, role in zip(chosen, (LegRole.EXTERNAL, LegRole.INTERNAL), strict=False):
        packets = sorted(leg.packets, key=lambda x: x[0])
        first_ssrc = int.from_bytes(packets[0][1][8:12], "big")
        tracks.append(
            LegTrack(
                role.value,
                role,
                "; ".join(
                    f"ssrc 0x{ssrc:08x} {s[0]}:{s[1]} -> {d[0]}:{d[1]} ({n} packets)"
                    for (ssrc, s, d), n in leg.streams.items()
                ),
                [(t - t0, p) for t, p in packets],
                first_ssrc,
                tuple(table.values()),
            )
        )
    desc = f"{path} call {call.call_id}"
    recording = Recording(
        tracks, desc, {}, sip_call_id=call.call_id, identity=call.identity, ani=call.ani
    )
    return recording, extra


def _unassociated(leg: _Leg, t0: int, reason: str, call_id: str = "") -> list[Unassociated]:
    out = []
    for (ssrc, src, dst), n in leg.streams.items():
        first = min(t for t, p in leg.packets if int.from_bytes(p[8:12], "big") == ssrc)
        out.append(Unassociated(ssrc, src, dst, n, round((first - t0) / 1e9, 3), reason, call_id))
    return out
