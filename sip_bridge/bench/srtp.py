"""SRTP unprotect cost per packet in C, beside plain RTP parsing in the same run.

Real speech as 20 ms PCMU RTP packets (160-byte payloads), protected by the native
sender under each suite. Each repeat replays the packets, interleaved variant by
variant: plain RTP (parse only) and, per suite, unprotect + parse, every packet timed
inside C (``cs_srtp_bench_replay``, CLOCK_MONOTONIC around the work; the copy into the
receive buffer is outside, as the ingest decrypts in place). Each repeat uses a fresh
receiving context (the replay window would refuse a second pass). Reports p50/p99/p99.9
per variant, what each suite adds over plain RTP at p50 and p99, and the clock overhead
(included in every figure, plain's too).
"""

from __future__ import annotations

import argparse
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from native import ffi, lib
from native.codec import ulaw_encode
from native.srtp import SRTP_SUITES, SrtpContext, key_length, suite_code
from sip_bridge.bench.jitter_trace import default_speech_dir, load_speech
from sip_bridge.bench.report import summarize

FRAME = 160
PLAIN = "plain_rtp"


def _packets(seconds: float, speech_dir: Path | None) -> list[bytes]:
    ulaw = ulaw_encode(load_speech(speech_dir or default_speech_dir(), seconds))
    return [
        struct.pack("!BBHII", 0x80, 0, k & 0xFFFF, k * FRAME, 0x5EC0DE)
        + ulaw[k * FRAME : (k + 1) * FRAME]
        for k in range(len(ulaw) // FRAME)
    ]


def _pack(packets: list[bytes]) -> tuple[Any, ...]:
    lengths = np.array([len(p) for p in packets], np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.uint64)]).astype(np.uint64)
    blob = np.frombuffer(b"".join(packets), np.uint8).copy()
    return blob, offsets, lengths


def _replay(ctx: Any, packed: tuple[Any, ...], scratch: Any) -> tuple[np.ndarray, int]:
    blob, offsets, lengths = packed
    n = len(lengths)
    cost = np.zeros(n, np.int64)
    results = np.zeros(n, np.int8)
    ok = lib.cs_srtp_bench_replay(
        ctx,
        ffi.from_buffer("uint8_t[]", blob),
        ffi.from_buffer("uint64_t[]", offsets),
        ffi.from_buffer("uint32_t[]", lengths),
        n,
        scratch,
        len(scratch),
        ffi.from_buffer("int64_t[]", cost, require_writable=True),
        ffi.from_buffer("int8_t[]", results, require_writable=True),
    )
    return cost, int(ok)


def _receiver(suite: str, key: bytes) -> Any:
    ctx = ffi.gc(lib.cs_srtp_new(), lib.cs_srtp_free)
    if lib.cs_srtp_set_key(ctx, suite_code(suite), key, len(key), ffi.NULL, 0) != 1:
        raise RuntimeError(f"cannot key {suite}")
    return ctx


def benchmark(seconds: float, repeats: int, speech_dir: Path | None) -> dict[str, Any]:
    plain = _packets(seconds, speech_dir)
    keys = {suite: os.urandom(key_length(suite)) for suite in SRTP_SUITES}
    protected = {PLAIN: _pack(plain)}
    for suite, key in keys.items():
        sender = SrtpContext(suite, key)
        protected[suite] = _pack([sender.protect(p, 0) for p in plain])
    scratch = ffi.new("uint8_t[]", 2048)
    costs: dict[str, list[np.ndarray]] = {name: [] for name in protected}
    passed = dict.fromkeys(protected, 0)
    for rep in range(repeats + 1):  # the first pass warms caches and is not counted
        for name, packed in protected.items():
            ctx = ffi.NULL if name == PLAIN else _receiver(name, keys[name])
            cost, ok = _replay(ctx, packed, scratch)
            if rep:
                costs[name].append(cost)
                passed[name] += ok
    clock = np.zeros(10_000, np.int64)
    lib.cs_bench_clock_overhead(ffi.from_buffer("int64_t[]", clock, require_writable=True), 10_000)
    per_variant: dict[str, Any] = {}
    for name, parts in costs.items():
        ns = np.concatenate(parts)
        per_variant[name] = {"packets_passed": passed[name], **summarize(ns, unit="ns")}
    base = per_variant[PLAIN]
    added = {
        suite: {
            "p50_ns": per_variant[suite]["p50"] - base["p50"],
            "p99_ns": per_variant[suite]["p99"] - base["p99"],
        }
        for suite in SRTP_SUITES
    }
    return {
        "benchmark": "srtp",
        "packets_per_repeat": len(plain),
        "repeats": repeats,
        "payload_bytes": FRAME,
        "per_packet": per_variant,
        "added_over_plain": added,
        "clock_overhead": summarize(clock, unit="ns"),
        "note": "unprotect + RTP parse per packet, timed in C; plain = RTP parse only",
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--seconds", type=float, default=20.0, help="speech per repeat (default %(default)s)")
    add("--repeats", type=int, default=10, help="timed passes (default %(default)s)")
    add("--speech-dir", type=Path, default=None, help="folder of 8 kHz mono .wav prompts")


def run(args: argparse.Namespace) -> dict[str, Any]:
    return benchmark(args.seconds, args.repeats, args.speech_dir)
