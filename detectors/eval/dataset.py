"""The labelled directory (``DIR/bonafide/<speaker>/*``, ``DIR/spoof/<speaker>/*``), the
speaker-level split, and laying out the shared corpus's MANIFEST.csv as such a directory.

Every split is by speaker, never by file: a speaker is in exactly one part. Speakers a
model was trained on (its manifest's ``training_speakers``) are never evaluated for it.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from detectors.eval.audio import AUDIO_SUFFIXES

LABELS = ("bonafide", "spoof")


@dataclass(frozen=True, slots=True)
class Item:
    """One evaluated call: one file, or all of a speaker's files back to back."""

    call_id: str
    label: str  # "bonafide" | "spoof"
    speaker: str
    files: tuple[Path, ...]


def scan(root: Path) -> list[Item]:
    """Every audio file under ``root/<label>/<speaker>/`` (recursively, sorted)."""
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    items = []
    for label in LABELS:
        base = root / label
        if not base.is_dir():
            continue
        for spk_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            files = sorted(
                p for p in spk_dir.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()
            )
            for f in files:
                rel = f.relative_to(root).as_posix()
                items.append(Item(rel, label, spk_dir.name, (f,)))
    if not items:
        raise ValueError(f"{root}: no audio under bonafide/<speaker>/ or spoof/<speaker>/")
    return items


def family_of(speaker: str) -> str:
    """A spoof speaker's generator family: the id's text before its first '_'
    (``gemini_Kore`` -> ``gemini``, ``espeak_en-us`` -> ``espeak``)."""
    return speaker.split("_", 1)[0]


def by_speaker(items: Sequence[Item]) -> list[Item]:
    """One call per (label, speaker): the speaker's files in order, back to back."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for it in items:
        groups.setdefault((it.label, it.speaker), []).extend(it.files)
    return [
        Item(f"{label}/{spk}", label, spk, tuple(files))
        for (label, spk), files in sorted(groups.items())
    ]


def split_of(speaker: str, test_fraction: float, seed: int) -> str:
    """``test`` or ``calib`` for this speaker: a hash of (seed, speaker), so the same
    speaker always lands in the same part whatever else is in the directory."""
    if test_fraction >= 1.0:
        return "test"
    digest = hashlib.sha256(f"{seed}:{speaker}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    return "test" if u < test_fraction else "calib"


@dataclass(frozen=True, slots=True)
class Split:
    test: frozenset[str]
    calib: frozenset[str]
    excluded: frozenset[str]  # trained on (never evaluated)

    def part(self, speaker: str) -> str | None:
        if speaker in self.test:
            return "test"
        if speaker in self.calib:
            return "calib"
        return None


def make_split(
    speakers: Iterable[str],
    *,
    heldout: Iterable[str] | None = None,
    test_fraction: float = 1.0,
    seed: int = 0,
    training_speakers: Iterable[str] = (),
) -> Split:
    """The speaker split for one detector. ``heldout``: the test speakers (the rest is
    calibration); else a deterministic hash split with ``test_fraction`` of speakers in
    test. Training speakers are excluded from both parts."""
    all_spk = frozenset(speakers)
    excluded = all_spk & frozenset(training_speakers)
    usable = all_spk - excluded
    if heldout is not None:
        held = frozenset(heldout)
        test = usable & held
        calib = usable - held
    else:
        test = frozenset(s for s in usable if split_of(s, test_fraction, seed) == "test")
        calib = usable - test
    return Split(test, calib, excluded)


def layout_from_manifest(manifest_csv: Path, out_dir: Path) -> int:
    """Symlink every file of a corpus MANIFEST.csv (columns path, label, speaker) into
    ``out_dir/<label>/<speaker>/``; returns the number of links."""
    base = manifest_csv.parent
    n = 0
    with manifest_csv.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            label, speaker, rel = row["label"], row["speaker"], row["path"]
            if label not in LABELS:
                raise ValueError(f"{manifest_csv}: unknown label {label!r} for {rel}")
            if not speaker or "/" in speaker or speaker.startswith("."):
                raise ValueError(f"{manifest_csv}: bad speaker id {speaker!r} for {rel}")
            src = (base / rel).resolve()
            if not src.is_file():
                raise ValueError(f"{manifest_csv}: {rel} is missing")
            dest_dir = out_dir / label / speaker
            dest_dir.mkdir(parents=True, exist_ok=True)
            name = rel.replace("/", "__")
            link = dest_dir / name
            if not link.exists():
                link.symlink_to(src)
            n += 1
    return n
