"""What a replay plays: one or two legs as RTP datagrams with their arrival times.

- A pcap/pcapng capture: UDP datagrams that parse as RTP (version 2, not RTCP) are
  grouped by SSRC; each SSRC is a stream, ordered by its first packet. Roles come from
  ``--external-ssrc`` / ``--internal-ssrc``, or by order (the first stream is external,
  the second internal). The capture's own timestamps are the arrival times, so its
  jitter, loss and reordering reach the jitter buffer as they happened. SDP bodies of SIP
  messages in the capture add their rtpmap payload types (e.g. a dynamic Opus PT).
- Audio files per leg (WAV/FLAC; any rate, resampled to 8 kHz): packetised as 20 ms
  µ-law RTP arriving exactly on time. A stereo file given alone is two legs: channel 1
  external, channel 2 internal.

Times are nanoseconds from the first packet of the replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import LegRole
from detectors.eval.audio import AudioError, read_audio, resample, to_int16
from native.jitter import DEFAULT_PAYLOAD_TYPES, PayloadType
from native.sim import g711_stream
from sip_bridge.replay.pcap import CaptureStats, Datagram, read_udp
from sip_bridge.sip.identity import CallerIdentity
from sip_bridge.sip.sdp import SessionDescription

MIN_PACKETS = 5  # fewer RTP packets with one SSRC is noise, not a leg
_NATIVE_NAMES = {
    "PCMU": "PCMU",
    "PCMA": "PCMA",
    "G722": "G722",
    "OPUS": "opus",
    "L16": "L16",
    "CN": "CN",
    "TELEPHONE-EVENT": "telephone-event",
}
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg"})


class ReplayInputError(ValueError):
    """The input cannot be replayed as given (the message says why and what to do)."""


@dataclass(slots=True)
class LegTrack:
    """One leg: its role, where it came from, and (arrival ns, RTP datagram) in order."""

    label: str
    role: LegRole
    source: str
    packets: list[tuple[int, bytes]]
    ssrc: int | None = None
    payload_types: tuple[PayloadType, ...] = DEFAULT_PAYLOAD_TYPES


@dataclass(slots=True)
class Recording:
    """The legs of one call and what the reader skipped."""

    legs: list[LegTrack]
    description: str
    skipped: dict[str, int] = field(default_factory=dict)
    sip_call_id: str = ""  # the SIP Call-ID, when the legs were found through SIP
    # the first INVITE's caller identity (STIR/SHAKEN checked without a trust store) and
    # calling number, for the caller_id dimension; None: no plain-SIP INVITE seen
    identity: CallerIdentity | None = None
    ani: str = ""

    @property
    def duration_ns(self) -> int:
        return max((leg.packets[-1][0] for leg in self.legs if leg.packets), default=0)


def is_capture(path: Path) -> bool:
    return path.suffix.lower() not in AUDIO_SUFFIXES


# ---- captures -------------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    ssrc: int
    first: Datagram
    packets: list[tuple[int, bytes]] = field(default_factory=list)


def rtp_ssrc(payload: bytes) -> int | None:
    if len(payload) < 12 or payload[0] >> 6 != 2:
        return None
    if 200 <= payload[1] <= 204:  # RTCP SR/RR/SDES/BYE/APP (RFC 5761 demux)
        return None
    return int.from_bytes(payload[8:12], "big")


def _sdp_payload_types(payload: bytes) -> list[PayloadType]:
    """Payload types of the audio m-lines of an SDP body in a SIP message, if any."""
    head, sep, body = payload.partition(b"\r\n\r\n")
    if not sep or b"application/sdp" not in head.lower() or not body.startswith(b"v=0"):
        return []
    try:
        sdp = SessionDescription.parse(body)
    except ValueError:
        return []
    return payload_types_of(sdp)


def payload_types_of(sdp: SessionDescription) -> list[PayloadType]:
    """The payload types the native jitter buffer can decode, from the audio m-lines."""
    out = []
    for m in sdp.media:
        if m.media != "audio":
            continue
        for rm in m.rtpmaps.values():
            name = _NATIVE_NAMES.get(rm.encoding.upper())
            if name is None:
                continue
            try:
                out.append(PayloadType(rm.pt, name, rm.clock_rate, min(max(rm.channels, 1), 2)))
            except ValueError:
                continue
    return out


def read_capture(
    path: Path, external_ssrc: int | None = None, internal_ssrc: int | None = None
) -> Recording:
    stats = CaptureStats()
    streams: dict[int, _Stream] = {}
    table = {p.pt: p for p in DEFAULT_PAYLOAD_TYPES}
    rtcp = other = 0
    for d in read_udp(path, stats):
        ssrc = rtp_ssrc(d.payload)
        if ssrc is None:
            if len(d.payload) >= 2 and d.payload[0] >> 6 == 2:
                rtcp += 1
            else:
                found = _sdp_payload_types(d.payload)
                other += not found
                for p in found:
                    table.setdefault(p.pt, p)
            continue
        st = streams.setdefault(ssrc, _Stream(ssrc, d))
        st.packets.append((d.time_ns, d.payload))
    skipped = dict(stats.skipped)
    if rtcp:
        skipped["RTCP"] = rtcp
    if other:
        skipped["other UDP (SIP, ...)"] = other
    legs_found = [s for s in streams.values() if len(s.packets) >= MIN_PACKETS]
    if not legs_found:
        raise ReplayInputError(f"{path}: no RTP stream found ({stats.udp} UDP datagrams)")
    chosen = _choose(legs_found, external_ssrc, internal_ssrc, path)
    t0 = min(p[0] for s, _ in chosen for p in s.packets)
    legs = []
    for s, role in chosen:
        src, dst = s.first.src, s.first.dst
        legs.append(
            LegTrack(
                role.value,
                role,
                f"ssrc 0x{s.ssrc:08x} {src[0]}:{src[1]} -> {dst[0]}:{dst[1]}",
                [(t - t0, p) for t, p in sorted(s.packets, key=lambda x: x[0])],
                s.ssrc,
                tuple(table.values()),
            )
        )
    return Recording(legs, str(path), skipped)


def _choose(
    streams: list[_Stream], external: int | None, internal: int | None, path: Path
) -> list[tuple[_Stream, LegRole]]:
    by_ssrc = {s.ssrc: s for s in streams}
    listing = ", ".join(
        f"0x{s.ssrc:08x} ({len(s.packets)} packets, {s.first.src[0]}:{s.first.src[1]})"
        for s in streams
    )
    if external is None and internal is None:
        if len(streams) > 2:
            raise ReplayInputError(
                f"{path}: {len(streams)} RTP streams ({listing}); name one or two with "
                "--external-ssrc / --internal-ssrc"
            )
        roles = (LegRole.EXTERNAL, LegRole.INTERNAL)
        return [(s, roles[i]) for i, s in enumerate(streams)]
    out = []
    for ssrc, role in ((external, LegRole.EXTERNAL), (internal, LegRole.INTERNAL)):
        if ssrc is None:
            continue
        if ssrc not in by_ssrc:
            raise ReplayInputError(f"{path}: no RTP stream with SSRC 0x{ssrc:08x} ({listing})")
        out.append((by_ssrc[ssrc], role))
    return out


# ---- audio files ------------------------------------------------------------------------


def read_audio_legs(
    external: Path | None, internal: Path | None, single: Path | None = None
) -> Recording:
    """Legs from audio files; ``single`` alone may be stereo (external, internal)."""
    legs: list[LegTrack] = []
    if single is not None:
        channels, rate = _read_channels(single)
        roles = (LegRole.EXTERNAL, LegRole.INTERNAL)
        for i, x in enumerate(channels[:2]):
            legs.append(_audio_leg(x, rate, roles[i], f"{single} channel {i + 1}", i))
    for path, role in ((external, LegRole.EXTERNAL), (internal, LegRole.INTERNAL)):
        if path is not None:
            x, rate = _mono(path)
            legs.append(_audio_leg(x, rate, role, str(path), len(legs)))
    if not legs:
        raise ReplayInputError("nothing to replay: give FILE, or --external/--internal audio")
    names = " + ".join(leg.source for leg in legs)
    return Recording(legs, names)


def _mono(path: Path) -> tuple[npt.NDArray[np.float32], int]:
    try:
        return read_audio(path)
    except (AudioError, OSError) as exc:
        raise ReplayInputError(str(exc)) from None


def _read_channels(path: Path) -> tuple[Sequence[npt.NDArray[np.float32]], int]:
    try:
        import soundfile

        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except ImportError:
        x, rate = _mono(path)
        return [x], rate
    except Exception as exc:  # libsndfile raises its own error types
        raise ReplayInputError(f"{path}: cannot read audio: {exc}") from None
    return [np.ascontiguousarray(data[:, c]) for c in range(data.shape[1])], int(rate)


def _audio_leg(x: npt.NDArray[np.float32], rate: int, role: LegRole, src: str, n: int) -> LegTrack:
    pcm = to_int16(resample(x, rate, 8000))
    ssrc = 0x5EC0_0000 + n
    packets = g711_stream(pcm, ssrc=ssrc, seq0=1000 * (n + 1), ts0=160_000 * (n + 1))
    return LegTrack(role.value, role, src, [(p.send_ns, p.datagram) for p in packets], ssrc)
