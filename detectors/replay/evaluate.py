"""How well the fingerprint matches copies and keeps different speech apart, on a folder
of real speech (offline; numbers for ``docs``, not a test):

    python -m detectors.replay.evaluate SPEECH_DIR [--limit 400]

Every file (WAV/FLAC, any rate) goes to 8 kHz. Its copy goes through G.711 μ-law at
half the level and 20 ms later (plus 0-15 ms more, so the hop grid never lines up),
and is looked up in an index of all originals: a hit is the original found, a false
match any other file found. Each original is also looked up with itself excluded, so
any match there is a false match between different utterances.

    python -m detectors.replay.evaluate --same-text SPEECH_DIR [--work DIR]

measures copies under G.711 (with concealed loss), GSM and Opus against different
recordings of the same text instead (``detectors.replay.same_text``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from detectors.eval.audio import read_audio, resample, to_int16
from detectors.replay.fingerprint import RATE, fingerprint
from detectors.replay.index import Clip, FingerprintIndex
from native.codec import ulaw_decode, ulaw_encode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--limit", type=int, default=400)
    p.add_argument("--min-s", type=float, default=2.0)
    p.add_argument("--same-text", action="store_true", help="copies vs same-text pairs")
    p.add_argument("--work", type=Path, default=None, help="TTS cache (--same-text)")
    args = p.parse_args(argv)
    if args.same_text:
        from detectors.replay.same_text import run

        return run(args.dir, args.work)
    files = sorted(f for f in args.dir.rglob("*") if f.suffix.lower() in (".wav", ".flac"))
    audio = []
    for f in files:
        x, rate = read_audio(f)
        y = resample(x, rate, RATE) if rate != RATE else x
        if y.size >= args.min_s * RATE:
            audio.append((f.name, y.astype(np.float32)))
        if len(audio) >= args.limit:
            break
    index = FingerprintIndex()
    index.add([Clip(name, fingerprint(y), name, 0.0) for name, y in audio])
    rng = np.random.default_rng(0)
    hits = false_copy = false_other = 0
    bers = []
    for name, y in audio:
        shift = 160 + int(rng.integers(0, 120))
        copy = (np.concatenate([np.zeros(shift, np.float32), y]) * 0.5).astype(np.float32)
        pcm = ulaw_decode(ulaw_encode(to_int16(copy))).astype(np.float32) / 32768.0
        found = index.query(fingerprint(pcm))
        hits += any(m.clip.clip_id == name for m in found)
        false_copy += any(m.clip.clip_id != name for m in found)
        bers += [m.ber for m in found if m.clip.clip_id == name][:1]
        false_other += bool(index.query(fingerprint(y), exclude_owner=name))
    n = len(audio)
    print(
        json.dumps(
            {
                "utterances": n,
                "seconds": round(sum(y.size for _, y in audio) / RATE, 1),
                "copy_found": round(hits / n, 4),
                "copy_ber_median": round(float(np.median(bers)), 3) if bers else None,
                "false_match_copy_queries": false_copy,
                "false_match_distinct_queries": false_other,
                "distinct_pairs_compared": n * (n - 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
