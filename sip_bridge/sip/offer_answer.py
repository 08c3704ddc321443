"""SDP offer/answer (RFC 3264) for a receive-only monitor: pure functions.

Each audio m= line of the offer becomes a stream we accept (one leg) when it offers at
least one audio codec the native core decodes; anything else is rejected with port 0.
RTP/SAVP and RTP/SAVPF lines (SRTP keyed by SDES, RFC 4568) are accepted when one of
their a=crypto lines is usable (sip_bridge.sip.sdes): the stream carries the remote's
key to its leg and the answer a crypto line of ours; without one the line is rejected
(and an offer with nothing else acceptable gets 488). DTLS-SRTP (UDP/TLS/RTP/SAVP) is
not offered by the SBCs and PBXs we attach to here and is rejected.
We only ever receive: the answer's direction is ``recvonly`` when the peer sends,
``inactive`` when it does not (its own ``recvonly``/``inactive``, i.e. hold/pause).
Codecs are answered in the offer's order (the sender's preference: a monitor has no
reason to steer it), limited to what we decode, plus telephone-event and CN when offered.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Final

from native.srtp import SrtpKey
from sip_bridge.sip.sdes import CryptoLine, answer_value, choose
from sip_bridge.sip.sdp import MediaDescription, RtpMap, SessionDescription

# What the native core decodes (native/jitter.py's codec table), as (encoding, RTP clock):
# G.722 runs an 8 kHz clock over 16 kHz audio (RFC 3551), Opus always 48 kHz (RFC 7587),
# L16 (network byte order, mono or stereo) at the rates the core resamples to the leg's.
L16_RATES: Final = (8000, 12000, 16000, 24000, 32000, 44100, 48000)
AUDIO_CODECS: Final = frozenset(
    {("PCMU", 8000), ("PCMA", 8000), ("G722", 8000), ("OPUS", 48000)}
    | {("L16", rate) for rate in L16_RATES}
)
MAX_CHANNELS: Final = 2  # L16 with more is not accepted (Opus is always "2" in SDP)
EVENT_CODECS: Final = frozenset({("TELEPHONE-EVENT", 8000), ("CN", 8000)})


class NotAcceptableError(ValueError):
    """No stream of the offer is acceptable (answer 488)."""


@dataclass(frozen=True, slots=True)
class NegotiatedStream:
    """One m= line of an offer after negotiation (accepted or rejected)."""

    index: int
    accepted: bool
    payload_types: tuple[RtpMap, ...] = ()
    remote_host: str = ""
    remote_port: int = 0
    remote_direction: str = "sendrecv"
    label: str | None = None
    ptime: int | None = None
    crypto: CryptoLine | None = field(default=None, repr=False)  # SDES: what we receive with
    reject_reason: str = ""
    ssrc: int = 0  # the offer's first a=ssrc (0: none): a shared RTP port keys on it

    @property
    def srtp(self) -> SrtpKey | None:
        """The remote's SRTP key for this stream's leg (None: plain RTP)."""
        return self.crypto.key() if self.crypto is not None else None

    @property
    def codec(self) -> str:
        """The first audio codec we accepted (the one the peer most prefers)."""
        for p in self.payload_types:
            if (p.encoding.upper(), p.clock_rate) in AUDIO_CODECS:
                return p.encoding.upper()
        return ""

    @property
    def peer_sends(self) -> bool:
        return self.accepted and self.remote_direction in ("sendrecv", "sendonly")

    @property
    def answer_direction(self) -> str:
        return "recvonly" if self.peer_sends else "inactive"


def negotiate(
    offer: SessionDescription, audio_codecs: frozenset[tuple[str, int]] = AUDIO_CODECS
) -> list[NegotiatedStream]:
    """Decide per m= line; raises NotAcceptableError when no line is usable."""
    out: list[NegotiatedStream] = []
    for i, m in enumerate(offer.media):
        out.append(_negotiate_one(offer, i, m, audio_codecs))
    if not any(s.accepted for s in out):
        srtp = [s.reject_reason for s in out if s.reject_reason]
        if srtp:
            raise NotAcceptableError(f"no usable SRTP key: {srtp[0]}")
        raise NotAcceptableError("no audio stream with a codec we decode")
    return out


def _negotiate_one(
    offer: SessionDescription,
    index: int,
    m: MediaDescription,
    audio_codecs: frozenset[tuple[str, int]],
) -> NegotiatedStream:
    rejected = NegotiatedStream(index, False, label=m.label)
    proto = m.proto.upper()
    secure = proto in ("RTP/SAVP", "RTP/SAVPF")
    if m.media != "audio" or m.port == 0 or not (secure or "RTP/AVP" in proto):
        return rejected
    crypto = None
    if secure:
        crypto, why = choose([v for n, v in m.attributes if n == "crypto" and v])
        if crypto is None:
            return NegotiatedStream(index, False, label=m.label, reject_reason=why)
    maps = m.rtpmaps
    chosen = [
        p
        for p in maps.values()
        if (p.encoding.upper(), p.clock_rate) in audio_codecs and p.channels <= MAX_CHANNELS
    ]
    if not chosen:
        return rejected
    extras = [p for p in maps.values() if (p.encoding.upper(), p.clock_rate) in EVENT_CODECS]
    host = offer.media_connection(m) or ""
    return NegotiatedStream(
        index,
        True,
        tuple(chosen + extras),
        host,
        m.port,
        offer.media_direction(m),
        m.label,
        m.ptime,
        crypto,
        ssrc=_first_ssrc(m),
    )


def _first_ssrc(m: MediaDescription) -> int:
    """The first a=ssrc:<id> of the m= section, 0 when none is valid."""
    for name, value in m.attributes:
        if name == "ssrc" and value:
            head = value.split(" ", 1)[0]
            if head.isdigit() and 0 < int(head) < 1 << 32:
                return int(head)
    return 0


def offer_family(offer: SessionDescription | None) -> str | None:
    """The address type of the offer's media ("IP4" or "IP6"): its session-level c=,
    else the first m= section's; None without an offer or a usable c= line."""
    if offer is None:
        return None
    values = [v for t, v in offer.lines if t == "c"]
    values += [v for m in offer.media for t, v in m.lines if t == "c"]
    for value in values:
        parts = value.split()
        if len(parts) == 3 and parts[1] in ("IP4", "IP6"):
            return parts[1]
    return None


def address_type(host: str, family: str | None = None) -> str:
    """The SDP addrtype of ``host``: its own for an address literal, else ``family``
    (a name chosen for that family), else by the old rule (a colon: IP6)."""
    try:
        return "IP6" if ipaddress.ip_address(host.split("%", 1)[0]).version == 6 else "IP4"
    except ValueError:
        return family or ("IP6" if ":" in host else "IP4")


def build_answer(
    offer: SessionDescription,
    streams: list[NegotiatedStream],
    ports: dict[int, int],
    *,
    local_host: str,
    session_id: int,
    version: int,
    family: str | None = None,
) -> SessionDescription:
    """The SDP answer: one m= line per offered line, in order (RFC 3264 §6).
    ``local_host``: the address chosen for the offer's family (``family``, see
    ``offer_family``); c= and o= carry it with its own address type."""
    ip = address_type(local_host, family)
    answer = SessionDescription(
        [
            ("v", "0"),
            ("o", f"callshield {session_id} {version} IN {ip} {local_host}"),
            ("s", "callshield"),
            ("c", f"IN {ip} {local_host}"),
            ("t", "0 0"),
        ]
    )
    for stream, m in zip(streams, offer.media, strict=True):
        if not stream.accepted or stream.index not in ports:
            answer.media.append(MediaDescription(m.media, 0, m.proto, m.formats[:1] or ["0"]))
            continue
        media = MediaDescription(
            "audio", ports[stream.index], m.proto, [str(p.pt) for p in stream.payload_types]
        )
        for p in stream.payload_types:
            channels = f"/{p.channels}" if p.channels > 1 else ""  # opus/48000/2
            media.lines.append(("a", f"rtpmap:{p.pt} {p.encoding}/{p.clock_rate}{channels}"))
            fmtp = m.fmtp(p.pt)
            if fmtp is not None:
                media.lines.append(("a", f"fmtp:{p.pt} {fmtp}"))
        if stream.label is not None:
            media.lines.append(("a", f"label:{stream.label}"))
        if stream.ptime is not None:
            media.lines.append(("a", f"ptime:{stream.ptime}"))
        if stream.crypto is not None:
            media.lines.append(("a", f"crypto:{answer_value(stream.crypto)}"))
        media.lines.append(("a", stream.answer_direction))
        answer.media.append(media)
    return answer
