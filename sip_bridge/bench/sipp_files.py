"""What ``callshield bench sip`` hands SIPp: two scenarios (a plain call that plays a
pcap of real speech then hangs up, and a SIPREC INVITE with two streams and metadata)
and the pcap itself (µ-law RTP, 20 ms apart, that SIPp's ``play_pcap_audio`` replays),
plus readers for SIPp's ``-trace_rtt`` and ``-trace_stat`` files."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native.codec import ulaw_encode

FRAME = 160
_HEADERS = """\
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: "Load" <sip:+1555[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>{peer}
      Call-ID: [call_id]
      Contact: <sip:load@[local_ip]:[local_port]>
      Max-Forwards: 70"""


def _request(
    method: str, cseq: int, body: str = "", content_type: str = "", peer: bool = True
) -> str:
    headers = _HEADERS.format(peer="[peer_tag_param]" if peer else "")
    lines = [f"      {method} sip:[service]@[remote_ip]:[remote_port] SIP/2.0", headers]
    lines.append(f"      CSeq: {cseq} {method}")
    if content_type:
        lines.append(f"      Content-Type: {content_type}")
    lines.append("      Content-Length: [len]")
    return "\n".join(lines) + "\n\n" + body


_SDP = """\
      v=0
      o=load 1 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [media_port] RTP/AVP 0
      a=rtpmap:0 PCMU/8000
      a=sendonly
"""

_SIPREC_BODY = """\
      --BOUNDARY
      Content-Type: application/sdp

      v=0
      o=SRC 1 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [media_port] RTP/AVP 0
      a=rtpmap:0 PCMU/8000
      a=label:1
      a=sendonly
      m=audio [media_port+2] RTP/AVP 0
      a=label:2
      a=sendonly

      --BOUNDARY
      Content-Type: application/rs-metadata+xml
      Content-Disposition: recording-session

      <?xml version="1.0" encoding="UTF-8"?>
      <recording xmlns="urn:ietf:params:xml:ns:recording:1">
      <datamode>complete</datamode>
      <session session_id="[call_id]-s"/>
      <participant participant_id="a"><nameID aor="sip:+15550142@carrier.example"/></participant>
      <participant participant_id="b"><nameID aor="sip:agent@cc.example"/></participant>
      <stream stream_id="s1" session_id="[call_id]-s"><label>1</label></stream>
      <stream stream_id="s2" session_id="[call_id]-s"><label>2</label></stream>
      <participantstreamassoc participant_id="a"><send>s1</send></participantstreamassoc>
      <participantstreamassoc participant_id="b"><send>s2</send></participantstreamassoc>
      </recording>
      --BOUNDARY--
"""


def scenario(*, siprec: bool, pcap: str, hold_ms: int) -> str:
    """INVITE (INVITE->200 timed by SIPp's rtd), ACK, play the pcap, hold, BYE."""
    if siprec:
        invite = _request(
            "INVITE", 1, _SIPREC_BODY, "multipart/mixed;boundary=BOUNDARY", peer=False
        ).replace("      Max-Forwards: 70", "      Max-Forwards: 70\n      Require: siprec")
    else:
        invite = _request("INVITE", 1, _SDP, "application/sdp", peer=False)
    steps = [
        f'<send retrans="500"><![CDATA[\n{invite}    ]]></send>',
        '<recv response="100" optional="true"/>',
        '<recv response="200" rtd="true"/>',
        f"<send><![CDATA[\n{_request('ACK', 1)}    ]]></send>",
        f'<nop><action><exec play_pcap_audio="{pcap}"/></action></nop>',
        f'<pause milliseconds="{hold_ms}"/>',
        f'<send retrans="500"><![CDATA[\n{_request("BYE", 2)}    ]]></send>',
        '<recv response="200" crlf="true"/>',
    ]
    body = "\n  ".join(steps)
    name = "siprec" if siprec else "call"
    return (
        f'<?xml version="1.0" encoding="ISO-8859-1" ?>\n<scenario name="bench {name}">\n'
        f"  {body}\n</scenario>\n"
    )


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _udp_frame(payload: bytes, sport: int, dport: int) -> bytes:
    """Ethernet + IPv4 + UDP around ``payload``, 127.0.0.1 to 127.0.0.1."""
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
        b"\x7f\0\0\1",
        b"\x7f\0\0\1",
    )
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return b"\0" * 12 + b"\x08\x00" + ip + udp


def write_pcap(
    path: Path,
    audio: npt.NDArray[np.int16],
    ssrc: int = 0x5EED,
    *,
    seq0: int = 0,
    ts0: int = 8000,
    sport: int = 6000,
    dport: int = 6001,
) -> int:
    """µ-law RTP (PT 0) of ``audio``, one packet per 20 ms of pcap time, for SIPp's
    play_pcap_audio; returns the number of packets."""
    ulaw = ulaw_encode(audio[: audio.size - audio.size % FRAME])
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    packets = len(ulaw) // FRAME
    for k in range(packets):
        rtp = struct.pack(
            "!BBHII",
            0x80,
            0x80 if k == 0 else 0,
            (seq0 + k) & 0xFFFF,
            (ts0 + k * FRAME) & 0xFFFFFFFF,
            ssrc,
        )
        frame = _udp_frame(rtp + ulaw[k * FRAME : (k + 1) * FRAME], sport, dport)
        usec = 1_000_000 + k * 20_000
        out.append(
            struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, len(frame), len(frame))
        )
        out.append(frame)
    path.write_bytes(b"".join(out))
    return packets


def read_rtt(folder: Path) -> list[float]:
    """Every response time (ms) SIPp's ``-trace_rtt`` wrote in ``folder``."""
    out: list[float] = []
    for path in folder.glob("*_rtt.csv"):
        with path.open() as f:
            for row in csv.reader(f, delimiter=";"):
                if len(row) >= 2:
                    try:
                        out.append(float(row[1]))
                    except ValueError:
                        continue  # the header
    return out


def read_stat(path: Path) -> dict[str, str]:
    """The last row of SIPp's ``-trace_stat`` file, by column name."""
    if not path.exists():
        return {}
    with path.open() as f:
        rows = list(csv.reader(f, delimiter=";"))
    if len(rows) < 2:
        return {}
    return dict(zip(rows[0], rows[-1], strict=False))


def setup_times_from_trace(folder: Path) -> list[float]:
    """INVITE -> 200 per call (ms, µs resolution) from SIPp's ``-trace_msg`` log: the
    first time the INVITE (CSeq 1) was sent to the first 200 received for it."""
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    for path in folder.glob("*_messages.log"):
        with path.open(errors="replace") as f:
            stamp, kind, first, call_id, cseq = 0.0, "", "", "", ""
            for line in f:
                if line.startswith("-----------------------------------------------"):
                    _note(sent, answered, kind, first, call_id, cseq, stamp)
                    parts = line.split()
                    stamp = _seconds(parts[-1]) if len(parts) >= 3 else 0.0
                    kind, first, call_id, cseq = "", "", "", ""
                elif not kind and " message " in line:
                    kind = "sent" if " sent " in line else "received"
                elif kind and not first and line.strip():
                    first = line.strip()
                elif line.lower().startswith("call-id:"):
                    call_id = line.partition(":")[2].strip()
                elif line.lower().startswith("cseq:"):
                    cseq = line.partition(":")[2].strip()
            _note(sent, answered, kind, first, call_id, cseq, stamp)
    return [(answered[c] - t) * 1000.0 % 86_400_000 for c, t in sent.items() if c in answered]


def _seconds(clock: str) -> float:
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _note(
    sent: dict[str, float],
    answered: dict[str, float],
    kind: str,
    first: str,
    call_id: str,
    cseq: str,
    stamp: float,
) -> None:
    if not call_id or cseq.split() != ["1", "INVITE"]:
        return
    if kind == "sent" and first.startswith("INVITE "):
        sent.setdefault(call_id, stamp)
    elif kind == "received" and first.startswith("SIP/2.0 200"):
        answered.setdefault(call_id, stamp)
