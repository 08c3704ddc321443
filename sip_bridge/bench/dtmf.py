"""In-band DTMF (Goertzel) cost per 20 ms tick, beside the frame bank's tone check.

For each leg count, real 8 kHz speech (the shared corpus, µ-law coded) is cut into one
stream per leg and fed a tick at a time to ``detectors.dtmf.goertzel.InbandDtmf``
and, as the same-run baseline, to ``detectors.tone.ToneTracker`` (the per-tick FFT the
frame bank already runs on every analysed leg). Prints the per-tick time of each.
"""

from __future__ import annotations

import argparse
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.dtmf.goertzel import FRAME, InbandDtmf
from detectors.tone import ToneTracker
from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.bench.report import summarize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--legs", type=int, nargs="+", default=[1, 50, 200, 500])
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument(
        "--speech",
        type=Path,
        default=Path(__file__).resolve().parents[3] / "shared/data/speech/asterisk_prompts",
        help="a folder of 8 kHz 16-bit mono WAV files (searched recursively)",
    )


def _speech(folder: Path, samples: int) -> npt.NDArray[np.float32]:
    chunks, have = [], 0
    for path in sorted(folder.rglob("*.wav")):
        with wave.open(str(path)) as w:
            if (w.getframerate(), w.getsampwidth(), w.getnchannels()) != (8000, 2, 1):
                continue
            chunk = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        chunks.append(chunk)
        have += chunk.size
    if not chunks:
        raise SystemExit(f"no 8 kHz 16-bit mono WAV under {folder}")
    audio = np.concatenate(chunks)
    audio = np.tile(audio, samples // audio.size + 1)[:samples]
    return ulaw_decode(ulaw_encode(audio)).astype(np.float32)


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"ticks": args.ticks}
    for legs in args.legs:
        audio = _speech(args.speech, legs * args.ticks * FRAME).reshape(legs, -1)
        rows = np.arange(legs, dtype=np.intp)
        inband, tone = InbandDtmf(legs), ToneTracker(legs, gate_power=1e4)
        t_in, t_tone, keys = [], [], 0
        for k in range(args.ticks):
            x = np.ascontiguousarray(audio[:, k * FRAME : (k + 1) * FRAME])
            t0 = time.perf_counter()
            keys += sum(ch.on for ch in inband.update(rows, x))
            t1 = time.perf_counter()
            tone.update(rows, x)
            t2 = time.perf_counter()
            t_in.append((t1 - t0) * 1e6)
            t_tone.append((t2 - t1) * 1e6)
        out[f"legs_{legs}"] = {
            "inband_dtmf_per_tick": summarize(t_in),
            "baseline_tone_check_per_tick": summarize(t_tone),
            "inband_us_per_leg_frame_p50": float(np.percentile(t_in, 50)) / legs,
            "false_keys_on_speech": keys,
            "speech_minutes_corpus_tiled": legs * args.ticks * 0.02 / 60,
        }
    return out
