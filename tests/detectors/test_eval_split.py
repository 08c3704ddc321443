"""The speaker split never puts a speaker in two parts, never evaluates a training
speaker, and the manifest layout puts each file under its label and speaker."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.eval.dataset import by_speaker, layout_from_manifest, make_split, scan, split_of

speaker_ids = st.lists(st.text("abcdef0123_", min_size=1, max_size=6), max_size=40, unique=True)


@settings(max_examples=60, deadline=None)
@given(
    speakers=speaker_ids,
    training=speaker_ids,
    fraction=st.floats(0.0, 1.0),
    seed=st.integers(0, 1000),
)
def test_split_is_a_partition_without_training_speakers(
    speakers: list[str], training: list[str], fraction: float, seed: int
) -> None:
    s = make_split(speakers, test_fraction=fraction, seed=seed, training_speakers=training)
    assert not (s.test & s.calib)
    assert not ((s.test | s.calib) & set(training))
    assert s.test | s.calib | s.excluded == set(speakers)
    assert s.excluded == set(speakers) & set(training)
    # deterministic and independent of the other speakers present
    again = make_split(
        [*reversed(speakers), "zz_other"],
        test_fraction=fraction,
        seed=seed,
        training_speakers=training,
    )
    assert s.test <= again.test and s.calib <= again.calib


def test_heldout_list_defines_test_and_training_wins() -> None:
    s = make_split(["a", "b", "c", "d"], heldout=["a", "b"], training_speakers=["b"])
    assert s.test == {"a"} and s.calib == {"c", "d"} and s.excluded == {"b"}


def test_hash_split_fraction_is_roughly_respected() -> None:
    spk = [f"s{i}" for i in range(2000)]
    share = np.mean([split_of(x, 0.3, 7) == "test" for x in spk])
    assert 0.25 < share < 0.35
    assert all(split_of(x, 1.0, 7) == "test" for x in spk)


def _write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"RIFF")


def test_manifest_layout_and_scan(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    rows = [
        ("a/x/1.wav", "bonafide", "spk_a"),
        ("a/x/2.WAV", "bonafide", "spk_a"),
        ("b/3.flac", "bonafide", "spk_b"),
        ("tts/v1.wav", "spoof", "voice1"),
    ]
    for rel, _, _ in rows:
        _write(corpus / rel)
    with (corpus / "MANIFEST.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "dataset", "label", "speaker"])
        for rel, label, spk in rows:
            w.writerow([rel, "d", label, spk])
    out = tmp_path / "layout"
    assert layout_from_manifest(corpus / "MANIFEST.csv", out) == 4
    items = scan(out)
    assert sorted((i.label, i.speaker) for i in items) == sorted((r[1], r[2]) for r in rows)
    assert all(i.files[0].resolve().is_relative_to(corpus) for i in items)
    calls = by_speaker(items)
    assert [(c.label, c.speaker, len(c.files)) for c in calls] == [
        ("bonafide", "spk_a", 2),
        ("bonafide", "spk_b", 1),
        ("spoof", "voice1", 1),
    ]
