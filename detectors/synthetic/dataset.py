"""The training material: which spoofs to generate (a plan), generating them (cached,
in parallel), and every clip at 8 kHz with its label, part, speaker and generator.

Spoof "speakers" (the evaluation's unit of split) are ``<system id>`` for TTS (one voice
is one speaker) and ``<family>_<source speaker>`` for vocoder resynthesis, so the
family is always the text before the first '_' (``gemini_*`` included).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import read_audio
from detectors.synthetic import generators
from detectors.synthetic.channel import to_8k
from detectors.synthetic.corpus import Part, Utterance, part_of
from detectors.synthetic.generators import SYSTEMS, System
from detectors.synthetic.ivr_voices import DATASET_PREFIX as ADDED_PREFIX

log = logging.getLogger(__name__)
FloatArray = npt.NDArray[np.float32]
MIN_TEXT_CHARS = 70  # TTS input is joined up to this length: clips of about 4 s or more


@dataclass(frozen=True, slots=True)
class Job:
    system: System
    part: Part
    speaker: str  # the spoof's speaker id (see the module docstring)
    out: Path
    seed: int
    text: str | None = None
    source: Path | None = None
    model: Path | None = None  # a trained vocoder (neuralvoc)

    @property
    def system_id(self) -> str:
        """The system, and for a trained vocoder its cache name (the stage cache key
        sees it: another vocoder means other spoofs)."""
        return self.system.id if self.model is None else f"{self.system.id}@{self.model.stem}"


@dataclass(frozen=True, slots=True)
class Clip:
    path: Path
    label: int  # 1 = spoof
    part: Part
    speaker: str
    family: str  # "bonafide" for real speech
    system: str


@dataclass(frozen=True, slots=True)
class Budget:
    """How much to generate: texts per TTS system and part, vocoded files per speaker."""

    tts_per_system: int = 60
    vocoded_per_speaker: int = 2
    max_vocoded_per_family: int = 400


def _stable(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


def plan(
    corpus: Sequence[Utterance],
    work: Path,
    seed: int,
    budget: Budget,
    systems: Sequence[System] = SYSTEMS,
    vocoder_model: Path | None = None,
) -> list[Job]:
    """Generation jobs for every system that can run here (others are logged and left
    out), writing under ``work/<part>/<speaker>/``. TTS texts come from the transcripts
    of the system's own part; vocoders resynthesise bona fide files of their part's
    speakers. ``work`` must be specific to the seed (the split and the texts depend on it).
    ``vocoder_model``: the trained neural vocoder, needed when ``neuralvoc`` is a system."""
    bona = [u for u in corpus if u.label == "bonafide"]
    by_part: dict[Part, list[Utterance]] = defaultdict(list)
    added: dict[Part, list[Utterance]] = defaultdict(list)  # --with-bonafide's speakers
    for u in bona:
        into = added if u.dataset.startswith(ADDED_PREFIX) else by_part
        into[part_of(u.speaker, seed)].append(u)
    jobs: list[Job] = []
    for system in systems:
        why = generators.available(system)
        if why is not None:
            log.warning("spoof generator %s left out: %s", system.id, why)
            continue
        model = None
        if system.family == "neuralvoc":
            if vocoder_model is None:
                raise ValueError("the neuralvoc system needs a trained vocoder model")
            model = vocoder_model
        for part in system.parts:
            rng = np.random.default_rng(_stable(seed, system.id, part))
            pool = by_part[part]
            if system.vocoder:
                jobs += _vocoder_jobs(system, part, pool, work, rng, budget, model)
                if added[part]:  # their own draws: the other jobs stay as without them
                    more = np.random.default_rng(_stable(seed, system.id, part, "added"))
                    jobs += _vocoder_jobs(system, part, added[part], work, more, budget, model)
            else:
                jobs += _tts_jobs(system, part, pool, work, rng, budget)
    return jobs


def _tts_jobs(
    system: System,
    part: Part,
    pool: Sequence[Utterance],
    work: Path,
    rng: np.random.Generator,
    budget: Budget,
) -> list[Job]:
    texts = sorted({u.text for u in pool if u.text and u.language in system.languages})
    if not texts:
        return []
    jobs = []
    for i in range(min(budget.tts_per_system, system.per_part or budget.tts_per_system)):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < MIN_TEXT_CHARS:
            words.append(texts[int(rng.integers(len(texts)))])
        out = work / part / system.id / f"{i:04d}.wav"
        jobs.append(Job(system, part, system.id, out, int(rng.integers(1 << 31)), " ".join(words)))
    return jobs


def _vocoder_jobs(
    system: System,
    part: Part,
    pool: Sequence[Utterance],
    work: Path,
    rng: np.random.Generator,
    budget: Budget,
    model: Path | None = None,
) -> list[Job]:
    by_speaker: dict[str, list[Utterance]] = defaultdict(list)
    for u in pool:
        by_speaker[u.speaker].append(u)
    chosen: list[Utterance] = []
    for spk in sorted(by_speaker):
        files = sorted(by_speaker[spk], key=lambda u: str(u.path))
        pick = rng.permutation(len(files))[: budget.vocoded_per_speaker]
        chosen += [files[int(k)] for k in pick]
    if len(chosen) > budget.max_vocoded_per_family:
        keep = rng.permutation(len(chosen))[: budget.max_vocoded_per_family]
        chosen = [chosen[int(k)] for k in sorted(keep)]
    jobs = []
    for u in chosen:
        speaker = f"{system.family}_{u.speaker}"
        name = u.path.stem if model is None else f"{u.path.stem}.{model.stem}"
        name += f".r{system.revision}" if system.revision else ""
        out = work / part / speaker / f"{name}.wav"
        jobs.append(
            Job(system, part, speaker, out, int(rng.integers(1 << 31)), source=u.path, model=model)
        )
    return jobs


def _run_job(job: Job) -> str | None:
    if job.out.is_file():
        return None
    job.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = job.out.with_suffix(".part.wav")
    try:
        if job.source is not None:
            generators.vocode(job.system, job.source, tmp, job.seed, job.model)
        else:
            assert job.text is not None
            generators.tts(job.system, job.text, tmp, job.seed)
        tmp.replace(job.out)
    except Exception as exc:  # one failed utterance must not stop the build
        tmp.unlink(missing_ok=True)
        return f"{job.system.id} -> {job.out.name}: {exc}"
    return None


def generate(
    jobs: Sequence[Job],
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Run the jobs (files already there are kept: the work directory is a cache);
    returns the failures."""
    workers = workers or max(1, os.cpu_count() or 1)
    failures: list[str] = []
    todo = [j for j in jobs if not j.out.is_file()]
    if progress:
        progress(f"generating {len(todo)} spoofs ({len(jobs) - len(todo)} cached)")
    if not todo:
        return failures
    with ProcessPoolExecutor(workers) as pool:
        for i, err in enumerate(pool.map(_run_job, todo, chunksize=4)):
            if err:
                failures.append(err)
            if progress and (i + 1) % 200 == 0:
                progress(f"  {i + 1}/{len(todo)}")
    return failures


def subset(corpus: Sequence[Utterance], seed: int, per_part: int) -> list[Utterance]:
    """A small corpus for quick builds: in each part, the first ``per_part`` bona fide
    speakers and the first ``per_part`` unseen-generator voices (hash order), all files."""
    counts: dict[tuple[Part, str], int] = defaultdict(int)
    chosen: set[str] = set()
    for spk in sorted({u.speaker for u in corpus}, key=lambda s: _stable(seed, s)):
        key = (part_of(spk, seed), "gemini" if spk.startswith("gemini_") else "bona")
        if counts[key] < per_part:
            counts[key] += 1
            chosen.add(spk)
    return [u for u in corpus if u.speaker in chosen]


def clips(corpus: Sequence[Utterance], jobs: Sequence[Job], seed: int) -> list[Clip]:
    """Every clip of the build: bona fide files, generated spoofs, and the unseen
    generator's files (test only)."""
    out: list[Clip] = []
    for u in sorted(corpus, key=lambda u: str(u.path)):
        part = part_of(u.speaker, seed)
        if u.label == "spoof":
            if part == "test":
                fam = u.speaker.split("_", 1)[0]
                out.append(Clip(u.path, 1, part, u.speaker, fam, u.dataset))
            continue
        out.append(Clip(u.path, 0, part, u.speaker, "bonafide", u.dataset))
    for j in jobs:
        if j.out.is_file():
            out.append(Clip(j.out, 1, j.part, j.speaker, j.system.family, j.system_id))
    return out


def load_8k(clip_list: Sequence[Clip]) -> list[FloatArray]:
    """Each clip's audio at 8 kHz (the runtime's resampler)."""
    result = []
    for c in clip_list:
        x, rate = read_audio(c.path)
        result.append(to_8k(x, rate))
    return result
