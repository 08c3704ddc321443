"""More bona fide speakers, opt-in (``train-synthetic --with-bonafide debian-ivr``): the
French and Italian IVR voices of Debian's Asterisk prompt packages, native 8 kHz studio
speech of three people absent from the shared corpus.

They are pinned to train (``corpus.PINNED``), so dev and test, and the figures a build is
judged on, stay those of the builds without them. Each voice gives at most
``FILES_PER_VOICE`` files of at least ``MIN_FILE_S`` (a training window's length), chosen
by a hash of the file name, not by the seed: with the training sampler's square-root
weighting per speaker, ~140 files would have made three IVR voices a sixth of the bona
fide draws; 32 gives each the weight of LJ Speech (32 files).
"""

from __future__ import annotations

import hashlib
import wave
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from detectors.synthetic.corpus import Utterance

SOUNDS = Path("/usr/share/asterisk/sounds")
FILES_PER_VOICE = 32
MIN_FILE_S = 3.0
SETS = ("debian-ivr",)  # the --with-bonafide choices
DATASET_PREFIX = "debian_"  # Utterance.dataset of every file loaded here


@dataclass(frozen=True, slots=True)
class Voice:
    speaker: str
    folder: str  # under SOUNDS
    language: str
    package: str  # the Debian package that installs it (.ci/install.sh)
    licence: str


LICENCE = "CC-BY-SA-3.0"  # all three (the packages' debian/copyright)
VOICES = (
    Voice("asterisk_fr_ca_june", "fr_CA_f_June", "fr", "asterisk-core-sounds-fr-wav", LICENCE),
    Voice("asterisk_it_carlo", "it_IT_m_Carlo", "it", "asterisk-core-sounds-it-wav", LICENCE),
    Voice(
        "asterisk_it_menardi", "it_IT_f_Menardi", "it", "asterisk-prompt-it-menardi-wav", LICENCE
    ),
)


def _duration(path: Path) -> float:
    with wave.open(str(path)) as w:
        return float(w.getnframes() / w.getframerate())


def _order(voice: Voice, rel: str) -> bytes:
    return hashlib.sha256(f"{voice.speaker}:{rel}".encode()).digest()


def _chosen(voice: Voice, sounds: Path) -> list[tuple[Path, float]]:
    """(file, duration) of the voice's chosen files, sorted by path (each header read once)."""
    root = sounds / voice.folder
    if not root.is_dir():
        raise ValueError(f"{root} is missing: apt-get install {voice.package}")
    long = [(p, d) for p in root.rglob("*.wav") if (d := _duration(p)) >= MIN_FILE_S]
    long.sort(key=lambda pd: _order(voice, pd[0].relative_to(root).as_posix()))
    return sorted(long[:FILES_PER_VOICE])


def voice_files(voice: Voice, sounds: Path = SOUNDS) -> list[Path]:
    """The voice's chosen files, sorted by path: at most FILES_PER_VOICE of the WAVs of
    at least MIN_FILE_S, in hash order of their names."""
    return [p for p, _ in _chosen(voice, sounds)]


def load(sets: tuple[str, ...], sounds: Path = SOUNDS) -> list[Utterance]:
    """The bona fide utterances of ``sets`` (each one of SETS)."""
    unknown = set(sets) - set(SETS)
    if unknown:
        raise ValueError(f"unknown bona fide set(s) {sorted(unknown)} (one of {', '.join(SETS)})")
    if not sets:
        return []
    return [
        Utterance(
            path=p,
            dataset=f"{DATASET_PREFIX}{v.package}",
            label="bonafide",
            speaker=v.speaker,
            rate=8000,
            duration_s=d,
            licence=v.licence,
            text=None,
            language=v.language,
        )
        for v in VOICES
        for p, d in _chosen(v, sounds)
    ]


def added_speakers(utts: Iterable[Utterance]) -> list[str]:
    """The speakers of ``utts`` loaded here (a stage's cache key holds them)."""
    return sorted({u.speaker for u in utts if u.dataset.startswith(DATASET_PREFIX)})


def key_fields(speakers: Sequence[str]) -> tuple[object, ...]:
    """What a stage's weights depend on here: nothing when no voice is added (the keys
    of builds without them stay as they were)."""
    return ("bonafide", tuple(speakers), FILES_PER_VOICE, MIN_FILE_S) if speakers else ()
