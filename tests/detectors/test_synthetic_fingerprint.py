"""A build's digests of what it trained on (fingerprint.py): one family's changed file
changes that family's digest alone, whatever order the clips come in."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from detectors.synthetic import fingerprint
from detectors.synthetic.dataset import Clip


def _clips(root: Path) -> list[Clip]:
    out = []
    for family, system, label in (
        ("bonafide", "bonafide", 0),
        ("world", "world_r1", 1),
        ("espeak", "espeak_en-us", 1),
    ):
        for k in range(2):
            path = root / system / f"f{k}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"{system}-{k}".encode())
            out.append(Clip(path, label, "train", f"spk{k}", family, system))
    return out


def test_a_changed_file_changes_its_family_digest_alone(tmp_path: Path) -> None:
    clips = _clips(tmp_path)
    before = fingerprint.clips(clips)
    assert sorted(before["train"]) == ["bonafide", "espeak", "world"]
    assert fingerprint.clips(list(reversed(clips))) == before  # order does not matter
    (tmp_path / "world_r1" / "f1.wav").write_bytes(b"another vocoder build")
    after = fingerprint.clips(clips)
    changed = {f for f in before["train"] if before["train"][f] != after["train"][f]}
    assert changed == {"world"}


def test_the_windows_digest_reads_every_sample_label_and_dtype() -> None:
    rng = np.random.default_rng(0)
    w = rng.integers(-3000, 3000, (4, 32)).astype(np.int16)
    labels = np.array([0, 1, 0, 1], np.float32)
    base = fingerprint.windows(w, labels)
    assert fingerprint.windows(w.copy(), labels.copy()) == base
    w2 = w.copy()
    w2[3, 31] += 1
    assert fingerprint.windows(w2, labels) != base
    assert fingerprint.windows(w, labels[::-1].copy()) != base
    assert fingerprint.windows(w.astype(np.int32), labels) != base


def test_the_environment_names_the_arithmetic() -> None:
    env = fingerprint.environment()
    assert env["numpy"] == np.__version__
    assert env["cpu"] and env["cpu_count"] >= 1
