"""The impostor cohort for S-norm, built from a speech corpus by ``callshield models
build-cohort`` (or ``derive-speaker --cohort-from``), stored beside the speaker model.

Cohort speakers are chosen by a hash of their id (``in_cohort``), so every command that
must keep them out (``callshield eval --watchlist-sizes``) finds the same ones without
reading the file. Each utterance goes the telephone way (8 kHz G.711 µ-law, back to
16 kHz with the runtime's resampler), is cut into the model's windows and aggregated
like a call. The file also holds the calibration (``scoring.calibrate``): the spread of
S-normed impostor scores among the cohort's speakers, from which the threshold per
watchlist size is derived.

The file is ``<models dir>/speaker-resemblyzer-cohort-<model sha256[:12]>.npz``: derived
data of your corpus, never committed; a re-derived model needs a new cohort.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detectors.manifest import ModelManifest
from detectors.speaker.scoring import Calibration, Cohort, FloatArray, aggregate, calibrate

DEFAULT_DATASETS = ("speechocean762",)
DEFAULT_FRACTION = 0.25
TOP_K = 200
SPEECH_GATE = 10 ** (-45.0 / 10)  # the windowing's speech-energy gate (float power)
UNIT = 40  # 2.5 ms at 16 kHz, as the frame bank counts net speech


def in_cohort(speaker: str, fraction: float = DEFAULT_FRACTION) -> bool:
    h = int.from_bytes(hashlib.sha256(f"cohort\x1f{speaker}".encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def cohort_path(models_dir: Path, manifest: ModelManifest) -> Path:
    return models_dir / f"{manifest.name}-cohort-{manifest.sha256[:12]}.npz"


@dataclass(frozen=True, slots=True)
class Clip:
    """One utterance as the runtime would see it: window embeddings and net speech."""

    embeddings: FloatArray  # [W, D]
    speech_s: FloatArray  # [W] net speech per window

    def call_embedding(self) -> FloatArray:
        return aggregate(self.embeddings, self.speech_s)


def net_speech(window: FloatArray, rate: int = 16_000) -> float:
    n = window.size // UNIT
    power = np.mean(np.square(window[: n * UNIT].reshape(n, UNIT), dtype=np.float64), axis=1)
    return float(np.count_nonzero(power > SPEECH_GATE) * UNIT / rate)


class Embedder:
    """The speaker model on the telephone path (``evaluate.telephone_16k``)."""

    def __init__(self, model: Path, manifest: ModelManifest) -> None:
        from detectors.speaker.deriver import ort_session

        self.manifest = manifest
        self._session = ort_session(model)
        self.window, self.hop = manifest.input.window, manifest.input.hop

    def clip(self, x: FloatArray, rate: int, telephone: bool = True) -> Clip:
        from detectors.speaker.deriver import ort_embed, to_16k
        from detectors.speaker.evaluate import telephone_16k, window_stack

        y = telephone_16k(x, rate) if telephone else to_16k(x, rate)
        w = window_stack(y, self.window, self.hop)
        speech = np.array([net_speech(row) for row in w], np.float32)
        return Clip(ort_embed(self._session, w), speech)


def corpus(speech_dir: Path, datasets: Sequence[str]) -> dict[str, list[Path]]:
    """speaker -> bona fide files of ``datasets`` (MANIFEST.csv order)."""
    rows: dict[str, list[Path]] = defaultdict(list)
    with (speech_dir / "MANIFEST.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["label"] == "bonafide" and r["dataset"] in datasets:
                rows[r["speaker"]].append(speech_dir / r["path"])
    return dict(rows)


def build_cohort(
    model: Path,
    manifest: ModelManifest,
    speech_dir: Path,
    datasets: Sequence[str] = DEFAULT_DATASETS,
    fraction: float = DEFAULT_FRACTION,
    top_k: int = TOP_K,
) -> tuple[Cohort, list[str]]:
    from detectors.speaker.evaluate import load_audio

    emb = Embedder(model, manifest)
    vectors, speakers = [], []
    for spk, files in sorted(corpus(speech_dir, datasets).items()):
        if not in_cohort(spk, fraction):
            continue
        for path in files:
            loaded = load_audio(path)
            if loaded is None:
                continue
            vectors.append(emb.clip(*loaded).call_embedding())
            speakers.append(spk)
    if len(set(speakers)) < 3:
        raise ValueError(f"{speech_dir}: fewer than 3 cohort speakers in {list(datasets)}")
    e = np.stack(vectors).astype(np.float32)
    cal = calibrate(e, speakers, top_k)
    return Cohort(e, top_k, cal), speakers


def save_cohort(path: Path, cohort: Cohort, speakers: list[str], meta: dict[str, Any]) -> None:
    c = cohort.calibration
    cal = {"mean": c.mean, "sd": c.sd, "trials": c.trials}
    cal |= {"tail_u": c.tail_u, "tail_beta": c.tail_beta, "tail_share": c.tail_share}
    info = {**meta, "calibration": cal}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        embeddings=cohort.embeddings,
        speakers=np.asarray(speakers),
        top_k=np.asarray(cohort.top_k),
        info=np.asarray(json.dumps(info)),
    )
    tmp.replace(path)


def load_cohort(path: Path) -> tuple[Cohort, list[str], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as z:
        info: dict[str, Any] = json.loads(str(z["info"]))
        c = info["calibration"]
        cohort = Cohort(
            np.asarray(z["embeddings"], np.float32),
            int(z["top_k"]),
            Calibration(
                float(c["mean"]),
                float(c["sd"]),
                int(c["trials"]),
                float(c.get("tail_u", 0.0)),  # files before the tail fit: Gaussian
                float(c.get("tail_beta", 0.0)),
                float(c.get("tail_share", 0.0)),
            ),
        )
        return cohort, [str(s) for s in z["speakers"]], info


def run_cli(
    store: Any, speech_dir: Path, datasets: str, fraction: float, top_k: int = TOP_K
) -> int:
    from detectors.speaker.deriver import NAME

    try:
        installed = store.get(NAME)
    except (LookupError, ValueError) as exc:
        print(f"error: {exc} (run: callshield models derive-speaker)")
        return 1
    names = tuple(d for d in datasets.split(",") if d)
    try:
        cohort, speakers = build_cohort(
            installed.model_path, installed.manifest, speech_dir, names, fraction, top_k
        )
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}")
        return 1
    path = cohort_path(store.root, installed.manifest)
    meta = {
        "model": installed.manifest.key,
        "datasets": list(names),
        "fraction": fraction,
        "speech_dir": str(speech_dir),
    }
    save_cohort(path, cohort, speakers, meta)
    c = cohort.calibration
    print(
        f"cohort for {installed.manifest.key}: {len(speakers)} utterances of "
        f"{len(set(speakers))} speakers ({', '.join(names)}, hash fraction {fraction}) -> {path}\n"
        f"  S-normed impostor scores among them (top-{cohort.top_k} cohort): mean "
        f"{c.mean:.3f}, sd {c.sd:.3f}, upper {100 * c.tail_share:.0f} % above {c.tail_u:.3f} "
        f"with mean excess {c.tail_beta:.3f} ({c.trials} trials)"
    )
    return 0
