"""``--with-bonafide debian-ivr`` (issue 6): three more bona fide speakers from Debian's
French and Italian Asterisk prompt packages, pinned to train, capped per voice, with
their own spoof draws so that every other job of the plan stays as it was, and a stage
cache key that sees them only when they are there. The file choice runs on real WAVs
written here; one test reads the installed packages where they are."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from detectors.synthetic import dataset, generators, ivr_voices, train
from detectors.synthetic.corpus import Utterance, part_of
from detectors.synthetic.dataset import Budget

VOICE = ivr_voices.VOICES[0]


def _sounds(tmp_path: Path, seconds: list[float]) -> Path:
    root = tmp_path / "sounds" / VOICE.folder
    (root / "sub").mkdir(parents=True)
    for i, s in enumerate(seconds):
        where = root / "sub" if i % 3 == 0 else root
        soundfile.write(where / f"p{i:03d}.wav", np.zeros(int(s * 8000), np.int16), 8000)
    return tmp_path / "sounds"


def test_a_voice_gives_at_most_its_cap_of_files_long_enough_to_fill_a_window(
    tmp_path: Path,
) -> None:
    seconds = [1.0 + 0.1 * i for i in range(60)]  # 20 of them under 3 s
    sounds = _sounds(tmp_path, seconds)
    files = ivr_voices.voice_files(VOICE, sounds)
    assert len(files) == ivr_voices.FILES_PER_VOICE == 32
    assert files == sorted(files) and len(set(files)) == len(files)
    assert all(soundfile.info(f).duration >= ivr_voices.MIN_FILE_S for f in files)
    assert any(f.parent.name == "sub" for f in files)  # subfolders count
    assert ivr_voices.voice_files(VOICE, sounds) == files  # no seed, no run-to-run change
    few = _sounds(tmp_path / "few", [4.0, 2.0, 5.0])
    assert {f.name for f in ivr_voices.voice_files(VOICE, few)} == {"p000.wav", "p002.wav"}


def test_a_missing_package_is_named_and_an_unknown_set_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=VOICE.package):
        ivr_voices.voice_files(VOICE, tmp_path)
    with pytest.raises(ValueError, match="debian-ivr"):
        ivr_voices.load(("elsewhere",), tmp_path)
    assert ivr_voices.load((), tmp_path) == []  # without the option nothing is read


def test_the_added_speakers_are_in_train_at_every_seed() -> None:
    for voice in ivr_voices.VOICES:
        assert all(part_of(voice.speaker, seed) == "train" for seed in range(20))


def _utt(speaker: str, k: int, data: str = "x", text: str | None = None) -> Utterance:
    return Utterance(
        Path(f"/c/{speaker}/{k}.wav"), data, "bonafide", speaker, 8000, 4.0, "CC0", text, "en"
    )


def test_added_speakers_get_their_own_spoof_draws_and_leave_every_other_job(
    tmp_path: Path,
) -> None:
    base = [_utt(f"so762_{i:04d}", k, text=f"text {i} {k}") for i in range(40) for k in range(3)]
    added = [
        _utt(v.speaker, k, f"{ivr_voices.DATASET_PREFIX}{v.package}")
        for v in ivr_voices.VOICES
        for k in range(5)
    ]
    systems = [s for s in generators.selected() if s.family in ("world", "griffinlim", "espeak")]
    before = dataset.plan(base, tmp_path, 1, Budget(), systems)
    after = dataset.plan(base + added, tmp_path, 1, Budget(), systems)
    assert set(before) < set(after)  # every job of the plan without them, unchanged
    new = set(after) - set(before)
    speakers = {v.speaker for v in ivr_voices.VOICES}
    assert {j.part for j in new} == {"train"}
    assert all(j.source is not None and j.speaker.split("_", 1)[1] in speakers for j in new)
    vocoders = [s for s in systems if s.vocoder and "train" in s.parts]
    per_system = Budget().vocoded_per_speaker * len(speakers)
    assert len(new) == per_system * len(vocoders)  # resynthesis only: they have no text


def test_stage_keys_see_the_added_speakers_only_when_there() -> None:
    cfg = train.TrainConfig()
    systems = ["espeak_en-us", "kokoro_jf-alpha-en-us"]
    fields: tuple[object, ...] = (cfg.windows, cfg.epochs, cfg.batch, cfg.lr, cfg.weight_decay)
    weights = {"world": 2.0, "griffinlim": 2.0, "piper": 2.0, "kokoro": 2.0}
    fields += (tuple(sorted(set(systems))), tuple(sorted(weights.items())))
    before = hashlib.sha256(repr(fields).encode()).hexdigest()[:10]
    assert train.stage_key(cfg, 1, systems, []) == before  # cached default builds stay valid
    one = train.stage_key(cfg, 1, systems, ["asterisk_it_carlo"])
    three = train.stage_key(cfg, 1, systems, [v.speaker for v in ivr_voices.VOICES])
    assert len({before, one, three}) == 3


def test_the_installed_packages_give_three_capped_voices() -> None:
    missing = [v.package for v in ivr_voices.VOICES if not (ivr_voices.SOUNDS / v.folder).is_dir()]
    assert not missing, f"not installed: {', '.join(missing)} (.ci/install.sh installs them)"
    utts = ivr_voices.load(("debian-ivr",))
    assert {u.speaker for u in utts} == {v.speaker for v in ivr_voices.VOICES}
    for v in ivr_voices.VOICES:
        mine = [u for u in utts if u.speaker == v.speaker]
        assert len(mine) == ivr_voices.FILES_PER_VOICE
        assert all(u.rate == 8000 and u.duration_s >= 3.0 for u in mine)
        assert {u.language for u in mine} == {v.language} <= {"fr", "it"}
    assert ivr_voices.added_speakers(utts) == sorted(v.speaker for v in ivr_voices.VOICES)


def test_the_cli_option_puts_the_voices_and_their_spoofs_in_training(
    draws_with_and_without: Callable[..., list[tuple[tuple[Any, ...], dict[str, Any]]]],
) -> None:
    """``train-synthetic --with-bonafide debian-ivr`` (the quick CNN recipe) trains on
    the three voices and on resynthesis of them, and without the option on neither. The
    build is stopped at the window draw: training is the quick builds' tests' business."""
    assert all((ivr_voices.SOUNDS / v.folder).is_dir() for v in ivr_voices.VOICES), (
        "the Debian fr / it prompt packages are required (.ci/install.sh installs them)"
    )
    added = {v.speaker for v in ivr_voices.VOICES}
    drawn = draws_with_and_without("--with-bonafide", "debian-ivr")
    with_them, without = (list(args[0]) for args, _ in drawn)
    bona = {c.speaker for c in with_them if c.label == 0}
    spoofed = {c.speaker.split("_", 1)[1] for c in with_them if c.label == 1}
    assert added <= bona and spoofed & added
    assert sum(c.speaker in added for c in with_them if c.label == 0) == 3 * 32
    assert not added & {c.speaker for c in without}
    assert not {c.speaker.split("_", 1)[1] for c in without if c.label == 1} & added
    theirs = {c for c in with_them if added & {c.speaker, c.speaker.split("_", 1)[1]}}
    assert [c for c in with_them if c not in theirs] == without  # the rest, as without them
