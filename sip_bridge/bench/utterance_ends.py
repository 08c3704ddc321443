"""Utterance-end windows on real speech: how many windows, and which ends, each rule cuts.

Not a latency benchmark: the frame bank alone (no models run), fed sessions of real
speech as received 20 ms frames, with the runtime's synthetic-voice plan (window, hop,
end gap 0.5 s: the installed model's manifest with ``--models-dir``, else 3 s / 1.5 s)
under each ``--hangover``, ``--min-apart`` and ``--final`` (``UtteranceRule.final_s``)
combination. A session is one speaker's utterances (the shared corpus's MANIFEST.csv,
bona fide, in a seeded random order, each at a random level within ±3 dB) with 0.25-1.2 s
gaps and, with probability 0.35, a 1.5-8 s listening pause. Reported per rule: scored
windows, ends cut, ends after which speech resumed within 250 ms (cut inside a phrase),
and the utterances' real ends (last voiced frame of each recording) that got a window
ending there (within one frame).
"""

from __future__ import annotations

import argparse
import csv
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.eval.audio import read_audio, resample
from detectors.model_store import ModelStore
from detectors.windowing import FrameBank, LegInfo, UtteranceRule
from native import lib
from native.ingest_types import FRAME_INFO_DTYPE

GATE = 10 ** (-45.0 / 10) * 32768.0**2  # the frame bank's speech gate, int16 power
DATASETS = ("speechocean762", "librispeech_misc", "cmu_arctic", "asterisk_prompts", "ljspeech")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speech-dir", type=Path, default=_default_speech())
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hangover", type=float, nargs="+", default=[0.1, 0.08, 0.06, 0.04])
    parser.add_argument("--min-apart", type=float, nargs="+", default=[1.5])
    parser.add_argument(
        "--final",
        type=_final,
        nargs="+",
        default=[UtteranceRule().final_s],
        help="final_s: silence that notes an end inside min_apart ('none': never)",
    )
    parser.add_argument("--models-dir", type=Path, help="the synthetic-voice model's plan")


def _final(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def _default_speech() -> Path:
    return Path(__file__).resolve().parents[3] / "shared/data/speech"


Session = tuple[npt.NDArray[np.int16], list[int]]  # audio, real ends (frame index)


def _sessions(folder: Path, n: int, minutes: float, seed: int) -> list[Session]:
    manifest = folder / "MANIFEST.csv"
    if not manifest.is_file():
        raise SystemExit(f"--speech-dir {folder}: no MANIFEST.csv")
    by: dict[str, list[str]] = defaultdict(list)
    with manifest.open() as f:
        for r in csv.DictReader(f):
            if r["label"] == "bonafide" and r["dataset"] in DATASETS:
                by[r["speaker"]].append(r["path"])
    speakers = sorted(s for s in by if len(by[s]) >= 2)
    rng = random.Random(seed)
    rng.shuffle(speakers)
    out: list[Session] = []
    for spk in speakers[:n]:
        parts: list[npt.NDArray[np.float32]] = []
        ends: list[int] = []
        t = 0
        while t < minutes * 60 * 8000:
            x, rate = read_audio(folder / rng.choice(by[spk]))
            gain = 32767 * 10 ** (rng.uniform(-3, 3) / 20)
            y = (resample(x, rate, 8000) * gain).astype(np.float32)
            y = y[: y.size // 160 * 160]
            voiced = np.flatnonzero(np.mean(y.reshape(-1, 160) ** 2, axis=1) > GATE)
            if voiced.size == 0:
                continue
            ends.append(t // 160 + int(voiced[-1]) + 1)
            parts.append(y)
            t += y.size
            long_pause = rng.random() < 0.35
            gap = int(rng.uniform(*((1.5, 8.0) if long_pause else (0.25, 1.2))) * 50) * 160
            parts.append(np.zeros(gap, np.float32))
            t += gap
        audio = np.clip(np.concatenate(parts), -32768, 32767).astype(np.int16)
        out.append((audio, ends))
    return out


def _spec(models_dir: Path | None) -> DetectorSpec:
    if models_dir is not None:
        for inst in ModelStore(models_dir).installed():
            if inst.manifest.dimension is Dimension.SYNTHETIC_VOICE and not inst.manifest.fixture:
                return inst.manifest.detector_spec(None)
        raise SystemExit(f"--models-dir {models_dir}: no synthetic_voice model installed there")
    return DetectorSpec(
        name="synthetic-voice-plan",
        version="0",
        dimension=Dimension.SYNTHETIC_VOICE,
        sample_rate=8000,
        window=24000,
        hop=12000,
        min_net_speech_s=1.0,
    )


def _measure(spec: DetectorSpec, sessions: list[Session], rule: UtteranceRule) -> dict[str, int]:
    windows = cut = inside = real = real_cut = 0
    infos = np.zeros(1, FRAME_INFO_DTYPE)
    infos[0]["flag"], infos[0]["real_mask"] = lib.CS_FRAME_NORMAL, 0xFF
    ids = np.array([1], np.int32)
    for audio, ends in sessions:
        bank = FrameBank([spec.sample_rate], 2, 12.0)
        bank.utterances = rule
        plan = bank.plan(spec, 0.5)
        bank.add_leg(1, LegInfo("c", "caller", LegRole.EXTERNAL))
        declared: list[int] = []
        last = int(bank.utterance_end[0])
        frames = audio.reshape(-1, 160)
        for f in range(frames.shape[0]):
            bank.push(ids, frames[None, f], infos)
            windows += sum(1 for j in plan.collect(0.0) if j.abstained is None)
            end = int(bank.utterance_end[0])
            if end != last:
                declared.append(end)
                last = end
        power = np.mean(frames.astype(np.float32) ** 2, axis=1)
        voiced = np.flatnonzero(power > GATE)
        for d in declared:
            k = int(np.searchsorted(voiced, d))
            inside += int(k < voiced.size and (voiced[k] - d) * 0.02 < 0.25)
        cut += len(declared)
        real += len(ends)
        marks = np.array(declared, np.int64)
        real_cut += sum(1 for e in ends if marks.size and int(np.abs(marks - e).min()) <= 1)
    return {
        "scored_windows": windows,
        "ends_cut": cut,
        "ends_inside_phrases": inside,
        "real_ends": real,
        "real_ends_with_a_window": real_cut,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = _spec(args.models_dir)
    sessions = _sessions(args.speech_dir, args.sessions, args.minutes, args.seed)
    rules = []
    for final in args.final:
        for apart in args.min_apart:
            for hang in args.hangover:
                row: dict[str, Any] = {"hangover_s": hang, "min_apart_s": apart, "final_s": final}
                rule = UtteranceRule(hangover_s=hang, min_apart_s=apart, final_s=final)
                row.update(_measure(spec, sessions, rule))
                rules.append(row)
    return {
        "benchmark": "utterance-ends",
        "plan": {"detector": spec.name, "window_s": spec.window_s, "hop_s": spec.hop_s},
        "sessions": len(sessions),
        "minutes_each": args.minutes,
        "seed": args.seed,
        "rules": rules,
    }
