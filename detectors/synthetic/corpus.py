"""The shared speech corpus (``shared/data/speech/MANIFEST.csv``) as training material,
and the speaker split train / dev / test.

Every split is by speaker (DESIGN, data README): a speaker is in exactly one part, and
every spoof made from a speaker's audio or text is on that speaker's side. ``part_of``
is a pure function of (speaker, seed): a hash, except for the pinned speakers below,
each pinned for a stated reason. ``gemini_*`` (modern neural TTS) is never trained on:
it is the unseen generator of the test part.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Part = Literal["train", "dev", "test"]
PARTS: tuple[Part, ...] = ("train", "dev", "test")
FRACTIONS = {"train": 0.6, "dev": 0.15}  # the rest (0.25) is test
UNSEEN_GENERATOR_PREFIX = "gemini_"
MIN_DURATION_S = 1.0  # shorter files (spoken digits) carry too little speech to learn from

# Speakers whose part is fixed, not hashed: single speakers with many files decide what a
# part is made of, so they are placed on purpose.
PINNED: dict[str, Part] = {
    # 110 native 8 kHz studio IVR prompts (en + es, one person): the hard negative a
    # detector must learn to accept; also the only native-8 kHz bona fide in quantity.
    "asterisk_allison_smith": "train",
    # LJ Speech: the voice behind most public vocoders, the natural resynthesis source.
    "ljspeech_lj": "train",
    # the one native 8 kHz recording outside the IVR sets: dev's telephone-band bona fide.
    "osr_us_000_0034": "dev",
    # a second, unseen IVR voice (50 Russian prompts): false alarms on studio IVR speech.
    "asterisk_ru_ivrvoice": "test",
    # the opt-in IVR voices of Debian's fr / it prompt packages (ivr_voices,
    # --with-bonafide debian-ivr): train only, so dev and test stay those of every build
    "asterisk_fr_ca_june": "train",
    "asterisk_it_carlo": "train",
    "asterisk_it_menardi": "train",
}


@dataclass(frozen=True, slots=True)
class Utterance:
    path: Path
    dataset: str
    label: str  # "bonafide" | "spoof"
    speaker: str
    rate: int
    duration_s: float
    licence: str
    text: str | None  # transcript, where the corpus has one
    language: str  # "en", "es", "ru", ...


def part_of(speaker: str, seed: int = 0) -> Part:
    """The part of ``speaker``: pinned, ``test`` for the unseen generator, else a hash of
    (seed, speaker) cut at the FRACTIONS (same speaker, same seed: same part, whatever
    else is in the corpus)."""
    if speaker in PINNED:
        return PINNED[speaker]
    if speaker.startswith(UNSEEN_GENERATOR_PREFIX):
        return "test"
    digest = hashlib.sha256(f"synthetic-voice:{seed}:{speaker}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    if u < FRACTIONS["train"]:
        return "train"
    if u < FRACTIONS["train"] + FRACTIONS["dev"]:
        return "dev"
    return "test"


def split_speakers(speakers: Iterable[str], seed: int = 0) -> dict[Part, frozenset[str]]:
    """Speakers by part (disjoint by construction)."""
    out: dict[Part, set[str]] = {p: set() for p in PARTS}
    for s in speakers:
        out[part_of(s, seed)].add(s)
    return {p: frozenset(v) for p, v in out.items()}


def _language(rel: str, dataset: str) -> str:
    if dataset == "asterisk_prompts":
        return rel.split("/")[1]
    if dataset == "gemini_tts_es_mx":
        return "es"
    if dataset == "commonvoice":
        return "fr"
    return "en"


def _transcripts(speech_dir: Path) -> dict[str, str]:
    """Relative path -> transcript, for the files whose corpus ships one."""
    texts: dict[str, str] = {}
    so = speech_dir / "speechocean762" / "text"
    if so.is_file():
        by_id = {}
        for line in so.read_text(encoding="utf-8").splitlines():
            utt, _, text = line.partition("\t" if "\t" in line else " ")
            if text.strip():
                by_id[utt.strip()] = text.strip().capitalize() + "."
        for wav in (speech_dir / "speechocean762" / "WAVE").glob("*/*.WAV"):
            if wav.stem in by_id:
                texts[wav.relative_to(speech_dir).as_posix()] = by_id[wav.stem]
    for lang in ("en", "es", "ru"):
        d = speech_dir / "asterisk_prompts" / lang
        for txt in sorted(d.glob("*-sounds-*.txt")):
            for line in txt.read_text(encoding="utf-8").splitlines():
                if line.startswith(";") or ":" not in line:
                    continue
                name, _, text = line.partition(":")
                wav = d / f"{name.strip()}.wav"
                if text.strip() and wav.is_file():
                    texts[wav.relative_to(speech_dir).as_posix()] = " ".join(text.split())
    meta = speech_dir / "ljspeech" / "metadata.csv"
    if meta.is_file():
        for line in meta.read_text(encoding="utf-8").splitlines():
            parts = line.split("|")
            if len(parts) >= 2:
                for suffix in (".flac", ".wav"):
                    rel = f"ljspeech/wavs/{parts[0]}{suffix}"
                    if (speech_dir / rel).is_file():
                        texts[rel] = parts[-1].strip()
    return texts


def load_corpus(speech_dir: Path) -> list[Utterance]:
    """Every file of MANIFEST.csv (both labels) at least MIN_DURATION_S long."""
    manifest = speech_dir / "MANIFEST.csv"
    if not manifest.is_file():
        raise ValueError(f"{speech_dir}: no MANIFEST.csv (the shared speech corpus)")
    texts = _transcripts(speech_dir)
    out = []
    with manifest.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            duration = float(row["duration_s"])
            if duration < MIN_DURATION_S:
                continue
            rel = row["path"]
            path = speech_dir / rel
            if not path.is_file():
                raise ValueError(f"{manifest}: {rel} is missing")
            out.append(
                Utterance(
                    path=path,
                    dataset=row["dataset"],
                    label=row["label"],
                    speaker=row["speaker"],
                    rate=int(row["sample_rate"]),
                    duration_s=duration,
                    licence=row["licence"],
                    text=texts.get(rel),
                    language=_language(rel, row["dataset"]),
                )
            )
    return out


def licences(utterances: Iterable[Utterance]) -> dict[str, set[str]]:
    """Licence -> datasets using it (for the manifest's licence text)."""
    out: dict[str, set[str]] = {}
    for u in utterances:
        out.setdefault(u.licence, set()).add(u.dataset)
    return out
