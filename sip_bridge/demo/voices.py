"""What each demo call says: real recordings from the speech corpus, espeak-ng voices,
one recording played into two calls (replay) and a watch-listed speaker's voice.

Speech comes from the project's shared corpus (``$CALLSHIELD_SHARED/data/speech`` or
``../shared/data/speech``: its MANIFEST.csv names the speakers), else from Debian's
``asterisk-core-sounds-en-wav`` (one speaker only: no watch-listed voice then). Every
genuine call gets recordings no other call plays, so only the replay pair shares audio.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import read_audio, resample, to_int16
from sip_bridge.demo_detect import SENTENCES, VOICES, espeak_speech

RATE = 8000
WATCHED = "ljspeech_lj"  # the corpus speaker the demo puts on the watchlist
PROMPTS = "asterisk_allison_smith"
REPLAY_DELAY_S = 4.0  # the replayed copy starts this long after the first play


@dataclass(slots=True)
class CallPlan:
    name: str
    kind: str  # genuine | synthetic | replay | watchlist | spoofed_caller_id
    source: str
    audio: npt.NDArray[np.int16]
    ani: str = ""  # "" until plan_calls gives each call its own number
    identity: str | None = None  # an Identity header value, for the spoofed call
    delay_s: float = 0.0  # placed this long after the others


@dataclass(slots=True)
class Speech:
    """Files per speaker (8 kHz-readable audio) and the folder they came from."""

    root: Path
    by_speaker: dict[str, list[Path]] = field(default_factory=dict)


def find_corpus(explicit: Path | None = None) -> Speech | None:
    """``explicit`` (a corpus with MANIFEST.csv, or any folder of WAV files, read as one
    speaker), else the shared corpus, else Debian's Asterisk prompts."""
    if explicit is not None:
        return _read_corpus(explicit) or _one_speaker(explicit)
    candidates = []
    env = os.environ.get("CALLSHIELD_SHARED")
    if env:
        candidates.append(Path(env) / "data/speech")
    candidates.append(Path(__file__).resolve().parents[3] / "shared/data/speech")
    for root in candidates:
        if (found := _read_corpus(root)) is not None:
            return found
    return _one_speaker(Path("/usr/share/asterisk/sounds/en_US_f_Allison"))


def _read_corpus(root: Path) -> Speech | None:
    manifest = root / "MANIFEST.csv"
    if not manifest.is_file():
        return None
    speech = Speech(root)
    with manifest.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["label"] == "bonafide" and (root / row["path"]).is_file():
                speech.by_speaker.setdefault(row["speaker"], []).append(root / row["path"])
    return speech


def _one_speaker(folder: Path) -> Speech | None:
    files = sorted(folder.glob("*.wav")) if folder.is_dir() else []
    return Speech(folder, {PROMPTS: files}) if files else None


def load_8k(path: Path) -> npt.NDArray[np.int16]:
    x, rate = read_audio(path)
    return to_int16(resample(x, rate, RATE))


def _concat(files: list[Path], seconds: float) -> tuple[npt.NDArray[np.int16], list[Path]]:
    """Files (with 0.3 s pauses) until ``seconds``; the files used."""
    parts: list[npt.NDArray[np.int16]] = []
    used: list[Path] = []
    need = int(seconds * RATE)
    for path in files:
        if sum(len(p) for p in parts) >= need:
            break
        parts += [load_8k(path), np.zeros(int(0.3 * RATE), np.int16)]
        used.append(path)
    pcm = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    return pcm[:need], used


def watchlist_split(speech: Speech) -> tuple[list[Path], list[Path]] | None:
    """The watched speaker's enrolment files and the (other) files the call plays."""
    files = sorted(speech.by_speaker.get(WATCHED, []))
    if len(files) < 8:
        return None
    return files[:4], files[4:]


def plan_calls(speech: Speech | None, seconds: float) -> tuple[list[CallPlan], list[str]]:
    """The calls, and notes on what could not be planned (said, never faked)."""
    notes: list[str] = []
    if speech is None:
        return [], ["no speech found (shared corpus or asterisk-core-sounds-en-wav)"]
    prompts = sorted(speech.by_speaker.get(PROMPTS, []))
    pool = iter(prompts)

    def take() -> tuple[npt.NDArray[np.int16], list[Path]]:
        files = [p for _, p in zip(range(12), pool, strict=False)]
        return _concat(files, seconds)

    plans: list[CallPlan] = []
    for i in range(2):
        pcm, used = take()
        plans.append(CallPlan(f"genuine-{i + 1}", "genuine", f"{len(used)} recordings", pcm))
    for i in range(2):
        voice = VOICES[i % len(VOICES)]
        pcm = synthetic_speech(voice, i, seconds)
        plans.append(CallPlan(f"synthetic-{i + 1}", "synthetic", f"espeak-ng {voice}", pcm))
    pcm, used = take()
    plans.append(CallPlan("replay-1", "replay (original)", f"{len(used)} recordings", pcm))
    plans.append(
        CallPlan(
            "replay-2",
            "replay",
            f"the same recordings, {REPLAY_DELAY_S:.0f} s later",
            pcm.copy(),
            delay_s=REPLAY_DELAY_S,
        )
    )
    split = watchlist_split(speech)
    if split is None:
        notes.append(f"no watch-listed voice: the corpus has too little of {WATCHED}")
    else:
        pcm, used = _concat(split[1], seconds)
        plans.append(CallPlan("watchlisted", "watchlist", f"{WATCHED}, other recordings", pcm))
    pcm, used = take()
    plans.append(
        CallPlan(
            "spoofed-ani",
            "spoofed_caller_id",
            "Identity header failing verification",
            pcm,
            ani="+12025550123",
            identity=forged_identity("+12025550123"),
        )
    )
    for i, p in enumerate(plans):
        # one number per caller: seven calls at once from one number is what the
        # caller_id dimension's ANI velocity rightly flags, and the demo would show that
        p.ani = p.ani or f"+1415555{100 + i:04d}"
    return [p for p in plans if p.audio.size >= RATE], notes


def synthetic_speech(voice: str, call: int, seconds: float) -> npt.NDArray[np.int16]:
    """Sentences of this call only, each once, in ``voice``, padded with silence: a
    sentence heard twice (in this call, or in another call in another espeak voice) is
    what the replay dimension rightly flags, and the demo would show that instead."""
    need = int(seconds * RATE)
    half = len(SENTENCES) // 2
    mine = SENTENCES[call * half : (call + 1) * half] or SENTENCES[:1]
    parts = [espeak_speech(t, voice, len(t) / 18) for t in mine]  # at most one reading
    pcm = np.concatenate([np.concatenate([p, np.zeros(RATE // 2, np.int16)]) for p in parts])
    return np.concatenate([pcm, np.zeros(max(0, need - len(pcm)), np.int16)])[:need]


def forged_identity(ani: str) -> str:
    """A SHAKEN PASSporT claiming full attestation for ``ani``, signed with an algorithm
    SHAKEN does not allow (RFC 8588: ES256 only): the bridge's verification fails."""
    import base64
    import json
    import time

    def b64(obj: object) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    url = "https://cert.example.net/shaken.pem"
    head = {"alg": "HS256", "ppt": "shaken", "typ": "passport", "x5u": url}
    claims = {
        "attest": "A",
        "dest": {"tn": ["18005550199"]},
        "iat": int(time.time()),
        "orig": {"tn": ani.lstrip("+")},
        "origid": "8ab9b3a0-0000-4000-8000-00000000dead",
    }
    sig = base64.urlsafe_b64encode(b"\x00" * 32).rstrip(b"=").decode()
    return f"{b64(head)}.{b64(claims)}.{sig};info=<{url}>;alg=HS256;ppt=shaken"
