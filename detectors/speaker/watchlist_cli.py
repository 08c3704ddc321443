"""``callshield watchlist``: compute a voiceprint from audio and hand it to the dashboard,
which stores, audits and lists it (the dashboard has no model runtime).

    callshield watchlist embed --wav caller.wav                # the voiceprint as JSON
    callshield watchlist add --wav caller.wav --label "case 114" --legal-basis "..." \\
        --case-ref FR-114 --expires-days 365 --dashboard https://dash:8080 --api-key file:...
    callshield watchlist enrol --wav customer.wav --subject acct-1 --consent-ref IVR-7 ...

The audio goes the telephone way the bridge hears it (8 kHz G.711, back to 16 kHz with
the runtime's resampler), windows of the installed speaker model, the speech-weighted
aggregate the bridge computes for a call. Too little speech is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_MIN_SPEECH_S = 3.0


def add_parser(sub: Any, name: str) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="voiceprints for the watchlist and enrolments (stored by the dashboard)"
    )
    p.add_argument("--models-dir", type=Path, help="default: $CALLSHIELD_MODELS_DIR")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for verb, text in (
        ("embed", "print the voiceprint JSON of the audio"),
        ("add", "add a fraudster's voice to a tenant's watchlist (through the dashboard)"),
        ("enrol", "enrol a customer's voice under their account (through the dashboard)"),
    ):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("--wav", type=Path, action="append", required=True, help="repeatable")
        v.add_argument("--min-speech-s", type=float, default=DEFAULT_MIN_SPEECH_S)
        if verb == "embed":
            continue
        v.add_argument("--tenant", default="default")
        v.add_argument("--dashboard", required=True, help="the dashboard's base URL")
        v.add_argument("--api-key", required=True, help="analyst API key: file:/path or env:NAME")
        if verb == "add":
            v.add_argument("--label", required=True)
            v.add_argument("--legal-basis", required=True)
            v.add_argument("--case-ref", required=True)
            v.add_argument("--expires-days", type=int, required=True)
        else:
            v.add_argument("--subject", required=True, help="the account / subject reference")
            v.add_argument("--consent-ref", required=True)
            v.add_argument("--expires-days", type=int)
    p.set_defaults(run=run)


def voiceprint(models_dir: Path | None, wavs: list[Path], min_speech_s: float) -> dict[str, Any]:
    import numpy as np

    from detectors.bus.biometrics import encode_embedding
    from detectors.model_store import ModelSettings, ModelStore
    from detectors.speaker.cohort import Clip, Embedder
    from detectors.speaker.deriver import NAME
    from detectors.speaker.evaluate import load_audio

    store = ModelStore(models_dir or ModelSettings().models_dir)
    installed = store.get(NAME)
    emb = Embedder(installed.model_path, installed.manifest)
    clips = []
    for path in wavs:
        loaded = load_audio(path)
        if loaded is None:
            raise ValueError(f"{path}: not readable audio (WAV, or FLAC with soundfile)")
        clips.append(emb.clip(*loaded))
    clip = Clip(
        np.concatenate([c.embeddings for c in clips]), np.concatenate([c.speech_s for c in clips])
    )
    share = emb.hop / emb.window  # overlapping windows: each later one adds its hop
    speech = sum(float(c.speech_s[0] + c.speech_s[1:].sum() * share) for c in clips)
    if speech < min_speech_s:
        raise ValueError(f"only {speech:.1f} s of speech (need {min_speech_s:.1f} s)")
    vector = clip.call_embedding().astype("<f4")
    return {
        "model": installed.manifest.key,
        "dim": int(vector.size),
        "embedding": encode_embedding(vector.tobytes()),
        "net_speech_s": round(speech, 2),
        "source": "wav:" + ",".join(p.name for p in wavs)[:190],
    }


def _send(method: str, url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
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
        vp = voiceprint(args.models_dir, args.wav, args.min_speech_s)
        if args.verb == "embed":
            print(json.dumps(vp))
            return 0
        key = resolve_secret(args.api_key, "dashboard API key")
        base = args.dashboard.rstrip("/") + "/api/v1"
        if args.verb == "add":
            body = {
                "tenant": args.tenant,
                "label": args.label,
                "legal_basis": args.legal_basis,
                "case_ref": args.case_ref,
                "expires_in_days": args.expires_days,
                "voiceprint": vp,
            }
            done = _send("POST", f"{base}/watchlist", key, body)
            print(f"added {done['entry_id']} to {args.tenant}'s watchlist ({vp['net_speech_s']} s)")
            if done.get("status") == "pending":
                print("pending: another analyst must approve it on the dashboard's watchlist page")
        else:
            body = {
                "tenant": args.tenant,
                "consent_ref": args.consent_ref,
                "expires_in_days": args.expires_days,
                "voiceprint": vp,
            }
            _send("PUT", f"{base}/enrolments/{args.subject}", key, body)
            print(f"enrolled {args.subject} in {args.tenant} ({vp['net_speech_s']} s of speech)")
    except (ValueError, LookupError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
