"""Same recording or same words? The replay match of true copies under telephone channels
against pairs of *different* recordings of the *same* text (offline; numbers for
``docs/models/replay.md``, not a test):

    python -m detectors.replay.evaluate --same-text SPEECH_DIR [--work DIR]

Scripted phrases (a contact centre's "I'd like to check my balance") are each spoken by
every TTS voice installed (espeak-ng variants with their own rate and pitch, flite,
festival, the piper voice) and both sides of a pair go through G.711 µ-law, as two calls
would. Humans: speechocean762 (``SPEECH_DIR/speechocean762``, its ``text``) where two
speakers' prompts share their first words; different-text pairs of different speakers
as the baseline. Copies: every rendering and the first human files, at half level and
20-35 ms later, through G.711, G.711 with 3 % and 5 % packet loss concealed by the
native jitter buffer, GSM 06.10 and Opus 12 kbit/s, against the original through G.711.

A pair is queried as the stage queries a call: 4 s windows every 2 s, each against an
index of the other side with a relaxed verify bound (BER <= 0.5) and a minimum span of
0.64, 1.5 or 2 s of frames valid in both; the pair's value is the lowest BER found.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import read_audio, resample
from detectors.replay.fingerprint import RATE, fingerprint
from detectors.replay.index import Clip, FingerprintIndex, MatchConfig

FloatArray = npt.NDArray[np.float32]

PHRASES = (
    "I'd like to check my balance.",
    "I would like to speak to someone about my account.",
    "Can you tell me the balance on my checking account please?",
    "I want to report a lost card.",
    "Please transfer five hundred dollars to my savings account.",
    "Thank you for calling. Please say or enter your account number.",
    "I need to reset the password for my online banking.",
    "Yes, my date of birth is the fourth of July, nineteen eighty.",
    "Hi, I'm calling about a charge on my statement that I don't recognize.",
    "Your call is important to us. Please stay on the line.",
    "Can you read me the last three transactions on my account?",
    "I'd like to update the phone number on my account.",
)
# (family, voice, seed): espeak's seed draws its rate and pitch (a negative seed: espeak's
# default rate, 175 words/min, so only the voice differs; -2 also raises the pitch; "en-gb"
# is "en-gb+m1" already);
# piper's seed draws its noise and length
VOICES = (
    ("espeak", "en-us", -1),
    ("espeak", "en-us", -2),
    ("espeak", "en+m3", -1),
    ("espeak", "en+f4", -1),
    ("espeak", "en-gb", -1),
    ("espeak", "en-us+f2", -1),
    ("espeak", "en-us", 1),
    ("espeak", "en-us", 2),
    ("espeak", "en+m3", 3),
    ("espeak", "en+f4", 4),
    ("espeak", "en-gb+f2", 5),
    ("espeak", "en-gb-x-rp+m7", 6),
    ("espeak", "en-us+f3", 7),
    ("espeak", "en-us+m7", 8),
    ("flite", "kal", 0),
    ("flite", "kal16", 0),
    ("flite", "awb", 0),
    ("flite", "rms", 0),
    ("flite", "slt", 0),
    ("festival", "kal_diphone", 0),
    ("festival", "cmu_us_slt_arctic_hts", 0),
    ("piper", "joe", 1),
    ("piper", "joe", 2),
)
SPANS = {"0.64s": 40, "1.5s": 94, "2s": 125}  # min frames valid in both
WINDOW, HOP = 4 * RATE, 2 * RATE
BOUNDS = (0.1, 0.12, 0.13, 0.15, 0.2, 0.25)  # verify BER bounds counted
COPY_CHANNELS = ("g711", "g711_loss3", "g711_loss5", "gsm", "opus12")


def g711(x: FloatArray, loss: float = 0.0, seed: int = 0) -> FloatArray:
    from detectors.synthetic.channel import ulaw_channel

    return ulaw_channel(x, loss, seed)


def copy_of(x: FloatArray, channel: str, seed: int) -> FloatArray:
    """``x`` replayed into another call: half level, 20-35 ms later, then ``channel``."""
    rng = np.random.default_rng(seed)
    shift = 160 + int(rng.integers(0, 120))
    y = (np.concatenate([np.zeros(shift, np.float32), x]) * 0.5).astype(np.float32)
    if channel == "g711":
        return g711(y, 0.0, seed)
    if channel.startswith("g711_loss"):
        return g711(y, int(channel.removeprefix("g711_loss")) / 100, seed)
    from detectors.eval import channels

    if channel == "gsm":
        return g711(channels.apply("gsm", y, seed), 0.0, seed)
    if channel == "opus12":
        return g711(channels.opus_roundtrip(y, 12_000), 0.0, seed)
    raise ValueError(f"unknown copy channel {channel!r}")


def best_ber(query: FloatArray, ref: FloatArray) -> dict[str, float | None]:
    """Per minimum span: the lowest verified BER of any 4 s window of ``query`` against
    ``ref`` (None: no match at BER <= 0.5). One query with the shortest span, its matches
    filtered by span: the same candidates are verified whatever the span."""
    index = FingerprintIndex(MatchConfig(max_ber=0.5, min_frames=min(SPANS.values())))
    index.add([Clip("ref", fingerprint(ref), "ref", 0.0)])
    starts = range(0, max(1, query.size - WINDOW + HOP), HOP)
    found = [m for s in starts for m in index.query(fingerprint(query[s : s + WINDOW]))]
    out: dict[str, float | None] = {}
    for name, frames in SPANS.items():
        bers = [m.ber for m in found if m.frames >= frames]
        out[name] = min(bers) if bers else None
    return out


def render(work: Path) -> dict[tuple[str, str, int], list[FloatArray]]:
    """Every installed voice's rendering of every phrase (8 kHz), cached in ``work``."""
    from detectors.synthetic.generators import SYSTEMS, GeneratorError, System, available, tts

    work.mkdir(parents=True, exist_ok=True)
    systems = {(s.family, s.voice): s for s in SYSTEMS}
    out: dict[tuple[str, str, int], list[FloatArray]] = {}
    for family, voice, seed in VOICES:
        system = systems.get((family, voice)) or System(family, voice, ("dev",))
        if available(system) is not None:
            continue
        audio = []
        try:
            for i, text in enumerate(PHRASES):
                path = work / f"{system.id}_s{seed}_{i:02d}.wav"
                if not path.is_file() and seed < 0:
                    _espeak_default(voice, text, path, 80 if seed == -2 else 50)
                elif not path.is_file():
                    tts(system, text, path, seed)
                x, rate = read_audio(path)
                audio.append(resample(x, rate, RATE).astype(np.float32))
        except GeneratorError:
            continue
        out[(family, voice, seed)] = audio
    return out


def _espeak_default(voice: str, text: str, path: Path, pitch: int) -> None:
    import subprocess

    subprocess.run(
        ["espeak-ng", "-v", voice, "-p", str(pitch), "-w", str(path), text],
        check=True,
        capture_output=True,
        timeout=60,
    )


def humans(root: Path, limit: int) -> tuple[dict[str, tuple[str, str, FloatArray]], Path]:
    """speechocean762 utterance id -> (speaker, text, 8 kHz audio)."""
    base = root / "speechocean762"
    texts = dict(
        line.rstrip("\r\n").split("\t", 1)
        for line in (base / "text").read_text().splitlines()
        if "\t" in line
    )
    out = {}
    for f in sorted((base / "WAVE").rglob("*.WAV"))[:limit]:
        x, rate = read_audio(f)
        out[f.stem] = (f.parent.name, texts.get(f.stem, ""), resample(x, rate, RATE))
    return out, base


def _prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split(), b.split(), strict=False):
        if x != y:
            break
        n += 1
    return n


def _summary(rows: list[dict[str, float | None]]) -> dict[str, object]:
    out: dict[str, object] = {"pairs": len(rows)}
    for name in SPANS:
        bers = np.array([1.0 if r[name] is None else r[name] for r in rows], np.float64)
        found = bers[bers <= 0.5]
        out[name] = {
            "matched_le_0.5": int(found.size),
            "p50": round(float(np.percentile(bers, 50)), 3) if bers.size else None,
            "p90": round(float(np.percentile(bers, 90)), 3) if bers.size else None,
            "p99": round(float(np.percentile(bers, 99)), 3) if bers.size else None,
            "max": round(float(bers.max()), 3) if bers.size else None,
            "min": round(float(bers.min()), 3) if bers.size else None,
            **{f"le_{b}": int(np.count_nonzero(bers <= b)) for b in BOUNDS},
        }
    return out


def run(root: Path, work: Path | None, human_limit: int = 378, copy_humans: int = 120) -> int:
    work = work or Path(tempfile.gettempdir()) / "callshield-replay-same-text"
    work.mkdir(parents=True, exist_ok=True)
    voices = render(work)
    groups: dict[str, list[dict[str, float | None]]] = {}

    def add(group: str, query: FloatArray, ref: FloatArray) -> None:
        groups.setdefault(group, []).append(best_ber(query, ref))

    # same text, different rendering (both sides through G.711, as two calls)
    heard = {k: [g711(x, 0.0, i) for i, x in enumerate(v)] for k, v in voices.items()}
    for a, b in itertools.combinations(sorted(heard), 2):
        if a[:2] == b[:2]:
            kind = "tts_same_voice_other_rate_or_pitch"
        elif {a[:2], b[:2]} == {("flite", "kal"), ("flite", "kal16")}:
            kind = "tts_same_diphone_voice"  # one voice's diphones at 8 and 16 kHz
        elif a[0] == b[0] == "espeak" and a[2] < 0 and b[2] < 0:
            kind = "tts_espeak_voices_same_rate"
        elif a[0] == b[0] == "espeak":
            kind = "tts_espeak_voices"
        else:
            kind = "tts_other_voices"
        for i in range(len(PHRASES)):
            add(kind, heard[a][i], heard[b][i])
    # humans: shared leading words / different text, different speakers
    people, _ = humans(root, human_limit)
    ids = sorted(people)
    phone = {i: g711(people[i][2], 0.0, n) for n, i in enumerate(ids)}
    rng = np.random.default_rng(0)
    baseline = 0
    for u, w in itertools.combinations(ids, 2):
        (sa, ta, _), (sb, tb, _) = people[u], people[w]
        if sa == sb:
            continue
        if _prefix(ta, tb) >= 2:
            add("human_shared_prefix", phone[w], phone[u])
        elif baseline < 400 and rng.random() < 0.01:
            baseline += 1
            add("human_different_text", phone[w], phone[u])
    # true copies
    originals = [x for v in voices.values() for x in v]
    originals += [people[i][2] for i in ids[:copy_humans]]
    for k, x in enumerate(originals):
        ref = g711(x, 0.0, k)
        for channel in COPY_CHANNELS:
            add(f"copy_{channel}", copy_of(x, channel, 1000 + k), ref)
    print(
        json.dumps(
            {
                "voices": [f"{f}:{v}:s{s}" for f, v, s in voices],
                "copies": len(originals),
                "phrases": len(PHRASES),
                "groups": {g: _summary(r) for g, r in groups.items()},
            },
            indent=1,
        )
    )
    return 0
