"""WORLD spoofs are a function of their source file. WORLD's D4C tells voiced frames by
summing the power spectrum up to 7.9 kHz; on an 8 kHz file that reaches past Nyquist into
memory it never wrote, so the aperiodicity, and the spoof, took whatever the heap held
(two builds with one seed wrote different files). glibc's ``MALLOC_PERTURB_`` fills fresh
allocations with a chosen byte, which makes that visible at will: real pyworld on a real
8 kHz Asterisk prompt (the convert extra, as in CI)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from detectors.synthetic import generators, pairs, train
from detectors.synthetic.corpus import Utterance
from detectors.synthetic.dataset import Budget, Clip, plan

PROMPT = "data/speech/asterisk_prompts/en/astcc-login12pound.wav"  # 8 kHz, 5.4 s
(WORLD,) = [s for s in generators.SYSTEMS if s.family == "world"]

_VOCODE = """
import sys
from pathlib import Path
from detectors.synthetic import generators
(world,) = [s for s in generators.SYSTEMS if s.family == "world"]
generators.vocode(world, Path(sys.argv[1]), Path(sys.argv[2]), 0)
"""


def _vocode_with_heap_filled(byte: int, source: Path, out: Path) -> str:
    env = dict(os.environ, MALLOC_PERTURB_=str(byte))
    subprocess.run([sys.executable, "-c", _VOCODE, str(source), str(out)], env=env, check=True)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def test_a_world_spoof_of_an_8k_file_does_not_depend_on_the_heap(
    shared_dir: Path, tmp_path: Path
) -> None:
    source = shared_dir / PROMPT
    digests = {_vocode_with_heap_filled(b, source, tmp_path / f"{b}.wav") for b in (0, 85, 200)}
    assert len(digests) == 1  # 85 and 200 gave another file than 0 before the fix


def test_world_analyses_every_source_at_16k(shared_dir: Path, tmp_path: Path) -> None:
    x, rate = generators.read_audio(shared_dir / PROMPT)
    assert rate == 8000
    up, up_rate = generators.world_input(np.asarray(x, np.float64), rate)
    assert up_rate == 16000 and abs(len(up) - 2 * len(x)) <= 1
    same = np.zeros(1600)
    assert generators.world_input(same, 16000)[0] is same
    out = tmp_path / "w.wav"
    generators.vocode(WORLD, shared_dir / PROMPT, out, 0)
    y, y_rate = generators.read_audio(out)
    assert y_rate == 16000 and abs(len(y) - 2 * len(x)) <= 2 * 80  # WORLD's 5 ms frames


def _utt(path: Path, speaker: str) -> Utterance:
    return Utterance(path, "asterisk_prompts", "bonafide", speaker, 8000, 5.4, "CC", None, "en")


def test_revised_files_get_new_names_and_keep_the_plan(tmp_path: Path) -> None:
    """A work directory's older WORLD files are never reused (their name changed); which
    files are resynthesised, and with which seeds, does not change."""
    pool = [_utt(Path(f"/speech/spk{i % 20}/f{i}.wav"), f"spk{i % 20}") for i in range(60)]
    before = generators.System("world", "dio", ("train",))
    after = replace(before, revision=1)
    old = plan(pool, tmp_path, 0, Budget(), [before])
    new = plan(pool, tmp_path, 0, Budget(), [after])
    assert old and [(j.source, j.seed, j.speaker) for j in old] == [
        (j.source, j.seed, j.speaker) for j in new
    ]
    renamed = [o.out.with_name(f"{o.out.stem}.r1.wav") for o in old]
    assert [n.out for n in new] == renamed
    assert WORLD.revision >= 1


def test_a_revised_file_still_finds_its_source() -> None:
    clips = [
        Clip(Path("bona/libri_1/a.wav"), 0, "train", "libri_1", "bonafide", "bonafide"),
        Clip(Path("gen/world_libri_1/a.r1.wav"), 1, "train", "world_libri_1", "world", "w"),
    ]
    assert pairs.sources(clips) == {1: 0}


def test_the_revision_is_in_the_stage_key(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = train.TrainConfig()
    with_world, without = [WORLD.id, "espeak_en-us"], ["espeak_en-us"]
    keys = [train.stage_key(cfg, 1, with_world), train.stage_key(cfg, 1, without)]
    unrevised = tuple(replace(s, revision=0) for s in generators.SYSTEMS)
    monkeypatch.setattr(train, "SYSTEMS", unrevised)
    assert keys[0] != train.stage_key(cfg, 1, with_world)  # cached weights are not reused
    assert keys[1] == train.stage_key(cfg, 1, without)  # keys without it are unchanged


@pytest.mark.parametrize("rate", [11025, 22050])
def test_other_rates_are_brought_to_16k(rate: int) -> None:
    x = np.sin(np.arange(rate) * 2 * np.pi * 200 / rate)
    y, out = generators.world_input(x, rate)
    assert out == 16000 and abs(len(y) - 16000) <= 1 and y.dtype == np.float64
