"""Write the seed corpus for fuzz_rtp.c into native/fuzz/corpus/rtp/.

Pure struct packing (no native build needed), deterministic, a few dozen bytes per seed:
RTP with each header feature, RTCP compounds with every packet type, and a few
near-misses that stop at each error code. Run: python native/fuzz/make_corpus.py
"""

from __future__ import annotations

import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "corpus" / "rtp"
SSRC = 0x5EED0001


def rtp(first: int, second: int, tail: bytes = b"") -> bytes:
    return struct.pack("!BBHII", first, second, 4242, 160, SSRC) + tail


def rtcp(count: int, ptype: int, body: bytes, padded: bool = False) -> bytes:
    first = 0x80 | (0x20 if padded else 0) | count
    return struct.pack("!BBH", first, ptype, len(body) // 4) + body


BLOCK = struct.pack("!IIIIII", 0xB10C, (3 << 24) | 0xFFFFFE, 0x1FFFF, 40, 0xABCD0000, 0x8000)
SENDER = struct.pack("!IIIIII", SSRC, 3900000000, 1 << 31, 160, 10, 1600)
SDES = struct.pack("!IBB", SSRC, 1, 2) + b"cs" + bytes(4)

SEEDS: dict[str, bytes] = {
    "rtp_pcmu": rtp(0x80, 0x00, b"\xff\x7f\x00\x80\xfe\x7e\x01\x81"),
    "rtp_marker_pcma": rtp(0x80, 0x88, b"\xd5\x55\x2a\xaa"),
    "rtp_csrc2": rtp(0x82, 0x00, struct.pack("!II", 1, 2) + b"pl"),
    "rtp_ext_one_byte": rtp(0x90, 0x60, b"\xbe\xde\x00\x01\x10\xaa\x00\x00pl"),
    "rtp_ext_two_byte": rtp(0x90, 0x60, b"\x10\x00\x00\x01\x01\x01\xaa\x00pl"),
    "rtp_padding": rtp(0xA0, 0x00, b"pl\x00\x03"),
    "rtp_all_features": rtp(0xB1, 0x00, struct.pack("!I", 7) + b"\xbe\xde\x00\x00" + b"p\x01"),
    "rtp_dtmf": rtp(0x80, 0xE5, b"\x01\x0a\x01\x40"),
    "bad_version": rtp(0x40, 0x00, b"x"),
    "bad_csrc": rtp(0x8F, 0x00, bytes(8)),
    "bad_extension": rtp(0x90, 0x00, b"\xbe\xde\x00\x09"),
    "bad_padding": rtp(0xA0, 0x00, b"pl\x00\x09"),
    "rtcp_sr_sdes": rtcp(1, 200, SENDER + BLOCK) + rtcp(1, 202, SDES),
    "rtcp_rr_bye": rtcp(1, 201, struct.pack("!I", SSRC) + BLOCK)
    + rtcp(1, 203, struct.pack("!I", SSRC)),
    "rtcp_rr_empty": rtcp(0, 201, struct.pack("!I", SSRC)),
    "rtcp_app_fb": rtcp(1, 204, struct.pack("!I", SSRC) + b"TEST")
    + rtcp(1, 205, struct.pack("!IIHH", SSRC, 7, 5, 0)),
    "rtcp_padded": rtcp(0, 201, struct.pack("!I", SSRC) + b"\x00\x00\x00\x04", padded=True),
    "rtcp_bad_count": rtcp(2, 201, struct.pack("!I", SSRC) + BLOCK),
    "rtcp_bad_length": rtcp(0, 201, struct.pack("!I", SSRC))[:-2],
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (OUT / f"{name}.bin").write_bytes(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
