"""Write µ-law RTP from real speech into a pcap that SIPp's ``play_pcap_audio`` replays
(Ethernet + IPv4 + UDP + RTP, 20 ms apart), and read back what the bridge's jitter
buffer produced for comparison."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.bench.sipp_files import write_pcap

FRAME = 160


@dataclass(frozen=True)
class RtpTrack:
    """What a pcap carries: the µ-law decode of the source, and its RTP numbering."""

    decoded: npt.NDArray[np.int16]
    ssrc: int
    seq0: int
    ts0: int
    pt: int = 0


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
    """µ-law RTP (PT 0), one 20 ms packet every 20 ms of pcap time (the benchmark's
    writer), and what the receiver should decode from it."""
    trimmed = audio[: audio.size - audio.size % FRAME]
    write_pcap(path, trimmed, ssrc, seq0=seq0, ts0=ts0, sport=sport, dport=dport)
    return RtpTrack(ulaw_decode(ulaw_encode(trimmed)), ssrc, seq0, ts0)
