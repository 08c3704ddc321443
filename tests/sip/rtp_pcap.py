"""Write µ-law RTP from real speech into a pcap that SIPp's ``play_pcap_audio`` replays
(Ethernet + IPv4 + UDP + RTP, 20 ms apart), and read back what the bridge's jitter
buffer produced for comparison."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native.codec import ulaw_decode, ulaw_encode

FRAME = 160


@dataclass(frozen=True)
class RtpTrack:
    """What a pcap carries: the µ-law decode of the source, and its RTP numbering."""

    decoded: npt.NDArray[np.int16]
    ssrc: int
    seq0: int
    ts0: int
    pt: int = 0


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _frame(payload: bytes, sport: int, dport: int) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        0,
        0x4000,
        64,
        17,
        0,
        bytes([127, 0, 0, 1]),
        bytes([127, 0, 0, 1]),
    )
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return b"\0" * 12 + b"\x08\x00" + ip + udp


def write_rtp_pcap(
    path: Path,
    audio: npt.NDArray[np.int16],
    *,
    ssrc: int,
    seq0: int = 4000,
    ts0: int = 8000,
    sport: int = 6000,
    dport: int = 6001,
) -> RtpTrack:
    """µ-law RTP (PT 0), one 20 ms packet every 20 ms of pcap time."""
    ulaw = ulaw_encode(audio[: audio.size - audio.size % FRAME])
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for k in range(len(ulaw) // FRAME):
        rtp = (
            struct.pack(
                "!BBHII",
                0x80,
                0x80 if k == 0 else 0,
                (seq0 + k) & 0xFFFF,
                (ts0 + k * FRAME) & 0xFFFFFFFF,
                ssrc,
            )
            + ulaw[k * FRAME : (k + 1) * FRAME]
        )
        frame = _frame(rtp, sport, dport)
        usec = 1_000_000 + k * 20_000
        out.append(
            struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, len(frame), len(frame))
        )
        out.append(frame)
    path.write_bytes(b"".join(out))
    return RtpTrack(ulaw_decode(ulaw), ssrc, seq0, ts0)
