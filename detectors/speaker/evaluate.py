"""``callshield models eval-speaker``: equal error rate of the derived speaker model on
telephone speech of speakers it never saw.

Every utterance goes the telephone way: resampled to 8 kHz (scipy, when not already
8 kHz), G.711 µ-law encoded and decoded (``native.codec``), then up to 16 kHz with the
runtime's own streaming polyphase resampler (``detectors.resample``). It is embedded
window by window exactly as the runtime would (the model's window and hop; a clip
shorter than a window is zero-padded to one), and the call-level embedding is the
L2-normalised mean of its windows. Trials: every same-speaker pair (target) and every
different-speaker pair (non-target) of the chosen datasets, scored by cosine; at most
``per_speaker`` utterances per speaker so one prolific speaker does not dominate.

Reads ``MANIFEST.csv`` (path, dataset, label, speaker, ...) of a speech folder such as
the project's ``shared/data/speech``. Only the runtime's dependencies are needed.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

DEFAULT_DATASETS = ("speechocean762", "cmu_arctic", "librispeech_misc")


@dataclass(frozen=True, slots=True)
class SpeakerEval:
    eer: float
    threshold: float  # cosine at the EER
    target_trials: int
    nontarget_trials: int
    speakers: int
    utterances: int
    per_dataset: dict[str, float] = field(default_factory=dict)  # EER within each dataset
    cpu_ms_per_window: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "eer": round(self.eer, 4),
            "threshold": round(self.threshold, 4),
            "target_trials": self.target_trials,
            "nontarget_trials": self.nontarget_trials,
            "speakers": self.speakers,
            "utterances": self.utterances,
            "per_dataset_eer": {k: round(v, 4) for k, v in self.per_dataset.items()},
            "cpu_ms_per_window": round(self.cpu_ms_per_window, 2),
        }


def equal_error_rate(target: FloatArray, nontarget: FloatArray) -> tuple[float, float]:
    """(EER, threshold): where the miss rate (targets below) meets the false-accept
    rate (non-targets at or above), interpolated between the two closest thresholds."""
    t = np.sort(np.asarray(target, np.float64))
    n = np.sort(np.asarray(nontarget, np.float64))
    if t.size == 0 or n.size == 0:
        raise ValueError("EER needs target and non-target trials")
    thresholds = np.unique(np.concatenate([t, n]))
    miss = np.searchsorted(t, thresholds, side="left") / t.size
    fa = 1.0 - np.searchsorted(n, thresholds, side="left") / n.size
    i = int(np.argmax(miss >= fa))
    if i == 0:
        return float((miss[0] + fa[0]) / 2), float(thresholds[0])
    # linear interpolation of the crossing between i-1 and i
    d0, d1 = fa[i - 1] - miss[i - 1], fa[i] - miss[i]
    w = d0 / (d0 - d1) if d0 != d1 else 0.0
    eer = miss[i - 1] + w * (miss[i] - miss[i - 1])
    thr = thresholds[i - 1] + w * (thresholds[i] - thresholds[i - 1])
    return float(eer), float(thr)


def telephone_16k(x: FloatArray, rate: int) -> FloatArray:
    """float audio at ``rate`` → 8 kHz → G.711 µ-law → 16 kHz (runtime resampler)."""
    from scipy.signal import resample_poly

    from detectors.resample import PolyphaseResampler
    from native.codec import ulaw_decode, ulaw_encode

    if rate != 8000:
        g = gcd(rate, 8000)
        x = resample_poly(x, 8000 // g, rate // g).astype(np.float32)
    pcm = np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)
    decoded = ulaw_decode(ulaw_encode(pcm)).astype(np.float32) / 32768.0
    frame = 160
    pad = (-decoded.size) % frame
    decoded = np.concatenate([decoded, np.zeros(pad + frame, np.float32)])  # + flush frame
    rs = PolyphaseResampler(8000, 16000, frame, 1)
    rows = np.array([0], np.intp)
    out = [rs.process(rows, decoded[None, i : i + frame])[0] for i in range(0, decoded.size, frame)]
    y = np.concatenate(out)[rs.delay :]
    return y[: 2 * (decoded.size - frame - pad)].astype(np.float32)


def load_audio(path: Path) -> tuple[FloatArray, int] | None:
    """WAV with the standard library; FLAC/MP3 with soundfile where it is installed
    (it comes with the convert extra's librosa); None when neither reads it."""
    import wave

    from detectors.speaker.deriver import read_wav

    try:
        return read_wav(path)
    except (wave.Error, ValueError, EOFError):
        pass
    try:
        import soundfile
    except ImportError:
        return None
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception:
        return None
    return np.ascontiguousarray(data[:, 0]), int(rate)


def window_stack(y: FloatArray, window: int, hop: int) -> FloatArray:
    if y.size <= window:
        return np.pad(y, (0, window - y.size))[None, :].astype(np.float32)
    starts = range(0, y.size - window + 1, hop)
    return np.stack([y[s : s + window] for s in starts]).astype(np.float32)


def evaluate_speaker(
    model: Path,
    manifest: Any,
    speech_dir: Path,
    datasets: tuple[str, ...] = DEFAULT_DATASETS,
    per_speaker: int = 4,
    max_speakers: int | None = None,
) -> SpeakerEval:
    import time

    from detectors.speaker.deriver import ort_embed, ort_session

    rows: dict[str, list[tuple[str, Path]]] = defaultdict(list)
    with (speech_dir / "MANIFEST.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["label"] == "bonafide" and r["dataset"] in datasets:
                rows[r["speaker"]].append((r["dataset"], speech_dir / r["path"]))
    speakers = sorted(s for s, utts in rows.items() if len(utts) >= 2)
    if max_speakers is not None:
        speakers = speakers[:max_speakers]
    session = ort_session(model)
    window, hop = manifest.input.window, manifest.input.hop
    embs, spk, ds = [], [], []
    run_s, n_windows = 0.0, 0
    for s in speakers:
        for dataset, path in sorted(rows[s])[:per_speaker]:
            loaded = load_audio(path)
            if loaded is None:
                continue
            x, rate = loaded
            w = window_stack(telephone_16k(x, rate), window, hop)
            t0 = time.perf_counter()
            e = ort_embed(session, w).mean(axis=0)
            run_s += time.perf_counter() - t0
            n_windows += len(w)
            embs.append(e / max(float(np.linalg.norm(e)), 1e-12))
            spk.append(s)
            ds.append(dataset)
    if len(set(spk)) < 2:
        raise ValueError(f"{speech_dir}: fewer than 2 multi-utterance speakers in {datasets}")
    e = np.stack(embs)
    scores = e @ e.T
    labels = np.array(spk)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(np.ones_like(same), k=1)
    eer, thr = equal_error_rate(scores[same & upper], scores[~same & upper])
    per: dict[str, float] = {}
    dsa = np.array(ds)
    for d in sorted(set(ds)):
        m = (dsa[:, None] == d) & (dsa[None, :] == d) & upper
        if (same & m).any() and (~same & m).any():
            per[d] = equal_error_rate(scores[same & m], scores[~same & m])[0]
    return SpeakerEval(
        eer=eer,
        threshold=thr,
        target_trials=int((same & upper).sum()),
        nontarget_trials=int((~same & upper).sum()),
        speakers=len(set(spk)),
        utterances=len(spk),
        per_dataset=per,
        cpu_ms_per_window=1000.0 * run_s / max(n_windows, 1),
    )


def run_cli(store: Any, speech_dir: Path, datasets: str, per_speaker: int, as_json: bool) -> int:
    import json

    from detectors.speaker.deriver import NAME

    try:
        installed = store.get(NAME)
    except (LookupError, ValueError) as exc:
        print(f"error: {exc} (run: callshield models derive-speaker)")
        return 1
    try:
        r = evaluate_speaker(
            installed.model_path,
            installed.manifest,
            speech_dir,
            tuple(d for d in datasets.split(",") if d),
            per_speaker,
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    if as_json:
        print(json.dumps({"model": installed.manifest.key, **r.as_dict()}, indent=2))
        return 0
    per = ", ".join(f"{k} {100 * v:.2f} %" for k, v in r.per_dataset.items())
    print(
        f"{installed.manifest.key} on 8 kHz G.711 µ-law speech ({speech_dir}):\n"
        f"  EER {100 * r.eer:.2f} % at cosine {r.threshold:.3f}; {r.target_trials} target / "
        f"{r.nontarget_trials} non-target trials, {r.speakers} speakers, {r.utterances} "
        f"utterances\n  within dataset: {per or 'n/a'}\n"
        f"  CPU per window (1 thread): {r.cpu_ms_per_window:.1f} ms"
    )
    return 0
