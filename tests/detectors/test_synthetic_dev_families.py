"""Dev holds the resynthesis families (issue 6): Griffin-Lim and WORLD of the dev
speakers' own files, at the budget of the other parts, and adding them changes neither
the training nor the test plan (so cached state dicts stay valid). Pure logic over the
split and generator tables: no audio is generated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from detectors.synthetic import corpus, dataset, generators, train
from detectors.synthetic.corpus import Utterance, part_of
from detectors.synthetic.dataset import Budget, Job

SEED = 0
FILES_PER_SPEAKER = 4


def _corpus(per_part: int = 5) -> list[Utterance]:
    """``per_part`` hashed speakers in each part, FILES_PER_SPEAKER files each (paths
    that need not exist: planning reads none)."""
    speakers: dict[str, list[str]] = {p: [] for p in corpus.PARTS}
    i = 0
    while min(len(v) for v in speakers.values()) < per_part:
        spk = f"so762_{i:04d}"
        if len(speakers[part_of(spk, SEED)]) < per_part:
            speakers[part_of(spk, SEED)].append(spk)
        i += 1
    return [
        Utterance(
            path=Path(f"/corpus/{spk}/{k}.wav"),
            dataset="speechocean762",
            label="bonafide",
            speaker=spk,
            rate=16_000,
            duration_s=3.0,
            licence="CC BY 4.0",
            text=None,
            language="en",
        )
        for v in speakers.values()
        for spk in v
        for k in range(FILES_PER_SPEAKER)
    ]


def _vocoders(systems: list[generators.System]) -> list[generators.System]:
    return [s for s in systems if s.family in ("world", "griffinlim")]


def _key(j: Job) -> tuple[object, ...]:
    return (j.system.id, j.part, j.speaker, j.out, j.seed, j.source)


def test_dev_holds_griffinlim_and_world_of_dev_speakers_only() -> None:
    utts = _corpus()
    owner = {u.path: u.speaker for u in utts}
    jobs = dataset.plan(utts, Path("/work/gen"), SEED, Budget(), _vocoders(generators.selected()))
    dev = [j for j in jobs if j.part == "dev"]
    assert {j.system.family for j in dev} == {"world", "griffinlim"}
    for j in jobs:  # every resynthesis is of a file of its own part's speaker
        assert j.source is not None and part_of(owner[j.source], SEED) == j.part
        assert j.speaker == f"{j.system.family}_{owner[j.source]}"
    dev_speakers = {u.speaker for u in utts if part_of(u.speaker, SEED) == "dev"}
    for family in ("world", "griffinlim"):  # 2 files per dev speaker, like the other parts
        per_speaker = [
            sum(1 for j in dev if j.system.family == family and owner[j.source or Path()] == s)
            for s in sorted(dev_speakers)
        ]
        assert per_speaker == [Budget().vocoded_per_speaker] * len(dev_speakers)
    capped = dataset.plan(
        utts, Path("/w"), SEED, Budget(max_vocoded_per_family=3), _vocoders(generators.selected())
    )
    assert sum(1 for j in capped if j.part == "dev" and j.system.family == "world") == 3


def test_dev_resynthesis_leaves_training_and_test_plans_unchanged() -> None:
    utts = _corpus()
    systems = generators.selected()
    without_dev = [
        dataclasses.replace(s, parts=tuple(p for p in s.parts if p != "dev"))
        if s.family in ("world", "griffinlim")
        else s
        for s in systems
    ]
    now = dataset.plan(utts, Path("/w"), SEED, Budget(), _vocoders(systems))
    before = dataset.plan(utts, Path("/w"), SEED, Budget(), _vocoders(without_dev))
    assert [_key(j) for j in now if j.part != "dev"] == [_key(j) for j in before]
    trained = [j.system.id for j in now if j.part == "train"]
    assert trained and trained == [j.system.id for j in before if j.part == "train"]
    cfg = train.TrainConfig()  # the stage cache key sees training systems only
    assert train.stage_key(cfg, 1, trained) == train.stage_key(
        cfg, 1, [j.system.id for j in before if j.part == "train"]
    )


def test_dev_judges_every_test_family_but_the_seen_piper_voice() -> None:
    parts = {p: {s.family for s in generators.selected() if p in s.parts} for p in corpus.PARTS}
    # piper has one voice, trained on: test holds it as a seen voice; gemini (unseen
    # generator) is corpus data of test speakers only, never generated
    assert parts["test"] - parts["dev"] == {"piper"}
    assert {"world", "griffinlim", "lpc", "kokoro"} <= parts["dev"]
