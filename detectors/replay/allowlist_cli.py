"""``callshield allowlist``: fingerprint the contact center's own audio (IVR prompts,
hold music, announcements) and hand it to the dashboard, which stores and audits it
(the dashboard has no numpy). Bridges reload the allowlist when its version moves;
replay and synthetic_voice then ignore windows that match it.

    callshield allowlist fingerprint DIR            # one JSON line per file
    callshield allowlist add DIR --label "IVR prompts" --dashboard https://dash:8080 \\
        --api-key file:/run/secrets/admin-key [--tenant default]

Every WAV/FLAC file under DIR (recursively; any rate, channels averaged) goes
the way a bridge hears it: 8 kHz, G.711 μ-law, then fingerprinted whole. A file with
less than ``--min-audio-s`` of audible (non-silent) audio is refused; files longer than
10.7 minutes are cut there.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SUFFIXES = (".wav", ".flac")
BATCH = 50


def add_parser(sub: Any, name: str) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="the benign audio allowlist: fingerprint prompts and hold music"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for verb, text in (
        ("fingerprint", "print each file's fingerprint as a JSON line"),
        ("add", "add every file under DIR to a tenant's allowlist (through the dashboard)"),
    ):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("dir", type=Path, help="a folder of WAV/FLAC files (or one file)")
        v.add_argument("--min-audio-s", type=float, default=1.0)
        if verb == "add":
            v.add_argument("--label", required=True, help="what this audio is")
            v.add_argument("--tenant", default="default")
            v.add_argument("--dashboard", required=True, help="the dashboard's base URL")
            v.add_argument("--api-key", required=True, help="admin API key: file:/path or env:NAME")
    p.set_defaults(run=run)


def audio_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise ValueError(f"{root}: no such file or folder")
    found = sorted(p for p in root.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
    if not found:
        raise ValueError(f"{root}: no WAV or FLAC files")
    return found


def fingerprint_file(path: Path, min_audio_s: float) -> dict[str, Any]:
    """The file as a bridge hears it (8 kHz G.711 μ-law), fingerprinted."""
    import numpy as np

    from detectors.bus.allowlist import MAX_FRAMES
    from detectors.eval.audio import read_audio, resample, to_int16
    from detectors.replay.fingerprint import HOP, RATE, encode, fingerprint
    from native.codec import ulaw_decode, ulaw_encode

    x, rate = read_audio(path)
    y = resample(x, rate, RATE) if rate != RATE else x
    pcm = ulaw_decode(ulaw_encode(to_int16(y)))
    fp = fingerprint(pcm.astype(np.float32) / 32768.0)
    fp = fp.slice(0, MAX_FRAMES)
    audible = fp.valid_count * HOP / RATE
    if audible < min_audio_s:
        raise ValueError(f"{path}: only {audible:.1f} s of audible audio")
    return {
        "label": "",
        "source": path.name[:200],
        "fingerprint": encode(fp),
        "frames": len(fp),
        "audible_s": round(audible, 1),
    }


def _post(url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise ValueError(f"dashboard answered {exc.code}: {detail}") from None
    except urllib.error.URLError as exc:
        raise ValueError(f"dashboard not reachable: {exc.reason}") from None


def run(args: argparse.Namespace) -> int:
    from detectors.bus.secret_source import resolve_secret

    try:
        prints = [fingerprint_file(p, args.min_audio_s) for p in audio_files(args.dir)]
        if args.verb == "fingerprint":
            for fp in prints:
                print(json.dumps(fp))
            return 0
        key = resolve_secret(args.api_key, "dashboard API key")
        url = args.dashboard.rstrip("/") + "/api/v1/allowlist"
        added = 0
        for i in range(0, len(prints), BATCH):
            audio = [
                {k: v for k, v in fp.items() if k != "audible_s"} | {"label": args.label}
                for fp in prints[i : i + BATCH]
            ]
            done = _post(url, key, {"tenant": args.tenant, "audio": audio})
            added += len(done["entries"])
        seconds = sum(fp["audible_s"] for fp in prints)
        print(f"added {added} files ({seconds:.0f} s of audio) to {args.tenant}'s allowlist")
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
