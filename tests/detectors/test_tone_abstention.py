"""tone_or_music: voice detectors abstain on call-progress tones, DTMF and music, not on
real speech. All streams go through one frame bank, one leg each, in the same ticks:
real 8 kHz speech (every Asterisk prompt in shared/, en, es and ru, ~8 min), the same
speech with a -20 dBFS 3.5 kHz marker tone on top (the fixture's marker: above the
checked band), generated ringback, dial and busy tones, DTMF digits and a music-like
signal (chords of harmonic notes with attack and decay)."""

from __future__ import annotations

import wave
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.fixture_models import MARKER_HZ
from detectors.windowing import FrameBank, LegInfo, WindowJob, frames_from_pcm

RATE = 8000
SECONDS = 60.0
I16 = npt.NDArray[np.int16]


def _t(seconds: float) -> npt.NDArray[np.float64]:
    return np.arange(int(seconds * RATE)) / RATE


def _tones(freqs: tuple[float, ...], on_s: float = 0.0, off_s: float = 0.0) -> I16:
    t = _t(SECONDS)
    y = sum(np.sin(2 * np.pi * f * t) for f in freqs) * 4000.0
    if off_s:
        y = np.where(t % (on_s + off_s) < on_s, y, 0.0)
    return np.asarray(y, np.float64).astype(np.int16)


def _dtmf() -> I16:
    rows, cols = (697, 770, 852, 941), (1209, 1336, 1477, 1633)
    out: list[npt.NDArray[np.float64]] = []
    k, t = 0, _t(0.1)
    while sum(x.size for x in out) < SECONDS * RATE:
        tone = np.sin(2 * np.pi * rows[k % 4] * t) + np.sin(2 * np.pi * cols[(k * 3) % 4] * t)
        out += [tone * 6000.0, np.zeros(int(0.07 * RATE))]  # 100 ms digits, 70 ms gaps
        k += 1
    return np.concatenate(out)[: int(SECONDS * RATE)].astype(np.int16)


def _music(rng: np.random.Generator) -> I16:
    """Three-note chords of six harmonics each, a new chord every 400 ms."""
    t, y = _t(SECONDS), np.zeros(int(SECONDS * RATE))
    notes = [220.0, 247.0, 262.0, 294.0, 330.0, 349.0, 392.0, 440.0, 494.0, 523.0]
    step = int(0.4 * RATE)
    for s in range(0, y.size, step):
        tt = t[s : s + step] - t[s]
        env = np.minimum(1.0, tt / 0.02) * np.exp(-2.0 * tt)
        for f0 in rng.choice(notes, 3, replace=False):
            for h in range(1, 7):
                y[s : s + step] += env * np.sin(2 * np.pi * f0 * h * tt + rng.uniform(0, 6)) / h
    return np.asarray(y / np.abs(y).max() * 8000.0).astype(np.int16)


def _speech(shared_dir: Path) -> list[I16]:
    files = sorted((shared_dir / "data/speech/asterisk_prompts").glob("*/*.wav"))
    parts = []
    for f in files:
        with wave.open(str(f)) as w:
            assert w.getframerate() == RATE and w.getsampwidth() == 2
            parts.append(np.frombuffer(w.readframes(w.getnframes()), np.int16))
    assert parts, "real speech is required"
    allx = np.concatenate(parts)
    n = int(SECONDS * RATE)
    return [allx[i : i + n] for i in range(0, allx.size - n + 1, n)]


def _run(streams: dict[str, I16], specs: list[DetectorSpec]) -> dict[tuple[str, str], Counter[str]]:
    bank = FrameBank([RATE], max_legs=len(streams), ring_s=12.0)
    for sid, name in enumerate(streams):
        bank.add_leg(sid, LegInfo(f"call-{name}", name, LegRole.EXTERNAL))
    plans = [bank.plan(s) for s in specs]
    frames = np.stack([x[: int(SECONDS * RATE)].reshape(-1, 160) for x in streams.values()])
    ids = np.arange(len(streams), dtype=np.int32)
    out: dict[tuple[str, str], Counter[str]] = {}
    for k in range(frames.shape[1]):
        pcm = np.ascontiguousarray(frames[:, k])
        bank.push(ids, pcm, frames_from_pcm(pcm))
        for plan in plans:
            job: WindowJob
            for job in plan.collect(0.0):
                why = job.abstained.value if job.abstained else "scored"
                out.setdefault((job.detector, job.key.leg_id), Counter())[why] += 1
    return out


@pytest.fixture(scope="module")
def outcomes(shared_dir: Path) -> dict[tuple[str, str], Counter[str]]:
    rng = np.random.default_rng(7)
    speech = _speech(shared_dir)
    t = _t(SECONDS)
    marker = 32768 * 0.1 * np.sin(2 * np.pi * MARKER_HZ * t)
    streams: dict[str, I16] = {f"speech{i}": x for i, x in enumerate(speech)}
    streams["marked"] = np.clip(speech[0] + marker, -32768, 32767).astype(np.int16)
    streams["ringback"] = _tones((440.0, 480.0), 2.0, 4.0)
    streams["dial"] = _tones((350.0, 440.0))
    streams["busy"] = _tones((480.0, 620.0), 0.5, 0.5)
    streams["dtmf"] = _dtmf()
    streams["music"] = _music(rng)
    noise = rng.normal(0.0, 30.0, (len(streams), int(SECONDS * RATE)))
    streams = {
        k: np.clip(x + n, -32768, 32767).astype(np.int16)
        for (k, x), n in zip(streams.items(), noise, strict=True)
    }
    voice = [
        DetectorSpec("sv4", "1", Dimension.SYNTHETIC_VOICE, RATE, 4 * RATE, 2 * RATE, 1.0),
        DetectorSpec("spk1", "1", Dimension.KNOWN_FRAUDSTER, RATE, RATE, RATE // 2, 0.1),
    ]
    activity = DetectorSpec(
        "act", "1", Dimension.SPEECH_ACTIVITY, RATE, RATE, RATE, max_concealed_ratio=1.0
    )
    return _run(streams, [*voice, activity])


def _rate(c: Counter[str]) -> float:
    return c["tone_or_music"] / max(1, c["tone_or_music"] + c["scored"])


def test_real_speech_is_scored_not_abstained(
    outcomes: dict[tuple[str, str], Counter[str]],
) -> None:
    for det in ("sv4", "spk1"):
        total: Counter[str] = Counter()
        for (d, leg), c in outcomes.items():
            if d == det and leg.startswith("speech"):
                total += c
        rate = _rate(total)
        print(f"{det}: false tone_or_music on real speech {rate:.2%} of {sum(total.values())}")
        assert total["scored"] > 100
        assert rate <= (0.0 if det == "sv4" else 0.01)
    marked = outcomes[("sv4", "marked")]
    assert marked["tone_or_music"] == 0 and marked["scored"] > 20  # 3.5 kHz is out of band


@pytest.mark.parametrize("leg", ["dial", "busy", "dtmf", "music"])
def test_tones_dtmf_and_music_abstain(
    outcomes: dict[tuple[str, str], Counter[str]], leg: str
) -> None:
    for det in ("sv4", "spk1"):
        c = outcomes[(det, leg)]
        if det == "sv4":  # 4 s windows: every one; 1 s windows of music: most
            assert c["scored"] == 0, (det, leg, c)
        assert c["tone_or_music"] >= 0.9 * sum(c.values()), (det, leg, c)


def test_ringback_never_scored_and_speech_activity_not_gated(
    outcomes: dict[tuple[str, str], Counter[str]],
) -> None:
    c = outcomes[("sv4", "ringback")]  # 2 s on, 4 s off: tone or too little sound
    assert c["scored"] == 0 and c["tone_or_music"] > 0
    assert set(c) <= {"tone_or_music", "too_little_speech"}
    for leg in ("dial", "music", "speech0"):  # not a voice dimension: never tone_or_music
        assert outcomes[("act", leg)]["tone_or_music"] == 0
        assert outcomes[("act", leg)]["scored"] > 0
    assert Abstention.TONE_OR_MUSIC.value == "tone_or_music"
