"""VAD gating: with Silero installed (copied from the silero-vad wheel, as `callshield
models install-vad` does), a window's net speech is energy AND Silero speech, so loud
noise no longer passes as speech while real speech still does. Real speech, white
noise at about -25 dBFS and silence go through one frame bank, one leg each, with and
without the gate; the gate's cost per leg-second and per batched step is printed."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.vad.gate import VadGate, gate_from_store
from detectors.vad.install import install_vad
from detectors.vad.silero import SileroVad
from detectors.windowing import FrameBank, LegInfo, frames_from_pcm

RATE = 8000
SECONDS = 40.0
SPEC = DetectorSpec("sv", "1", Dimension.SYNTHETIC_VOICE, RATE, 4 * RATE, 2 * RATE, 1.0)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models")
    install_vad(out)
    return out


def _streams(speech: npt.NDArray[np.int16]) -> dict[str, npt.NDArray[np.int16]]:
    n = int(SECONDS * RATE)
    reps = -(-n // speech.size)
    noise = np.random.default_rng(3).standard_normal(n) * 1800.0
    return {
        "speech": np.tile(speech, reps)[:n],
        "noise": np.clip(noise, -32768, 32767).astype(np.int16),
        "silence": np.zeros(n, np.int16),
    }


def _run(
    streams: dict[str, npt.NDArray[np.int16]], gate: VadGate | None
) -> dict[str, Counter[str]]:
    bank = FrameBank([RATE], max_legs=8, ring_s=12.0)
    bank.vad = gate
    for sid, name in enumerate(streams):
        bank.add_leg(sid, LegInfo(f"c-{name}", name, LegRole.EXTERNAL))
    plan = bank.plan(SPEC)
    frames = np.stack([x.reshape(-1, 160) for x in streams.values()])
    ids = np.arange(len(streams), dtype=np.int32)
    out: dict[str, Counter[str]] = {name: Counter() for name in streams}

    def collect() -> None:
        for job in plan.collect(0.0):
            out[job.key.leg_id][job.abstained.value if job.abstained else "scored"] += 1

    for k in range(frames.shape[1]):
        pcm = np.ascontiguousarray(frames[:, k])
        bank.push(ids, pcm, frames_from_pcm(pcm))
        collect()
    if gate is not None:  # the worker catches up with the last frames
        deadline = time.monotonic() + 20.0
        while min(gate.settled(r) or 0 for r in range(len(streams))) < bank.tick - 1:
            assert time.monotonic() < deadline, "the VAD gate did not catch up"
            time.sleep(0.01)
        collect()
    return out


def test_gate_is_none_without_the_model(tmp_path: Path) -> None:
    assert gate_from_store(tmp_path, 4, 100) is None


def test_vad_gating_on_real_speech_vs_noise(
    models_dir: Path, speech_8k: npt.NDArray[np.int16]
) -> None:
    streams = _streams(speech_8k)
    energy = _run(streams, None)
    gate = gate_from_store(models_dir, 8, 1024)
    assert gate is not None
    try:
        gated = _run(streams, gate)
    finally:
        gate.close()
    windows = int((SECONDS - 4) / 2) + 1
    assert sum(energy["noise"].values()) == sum(gated["noise"].values()) == windows
    assert energy["noise"]["scored"] == windows  # loud noise passes the energy gate
    assert gated["noise"]["too_little_speech"] == windows  # not Silero
    assert gated["silence"]["too_little_speech"] == windows
    assert gated["speech"]["scored"] >= 0.9 * energy["speech"]["scored"] > 0
    per_leg_s = 1000 * gate.step_s / (gate.chunks * gate.vad.chunk / RATE)
    per_step = 1000 * gate.step_s / gate.steps
    print(
        f"VAD gate: {per_leg_s:.2f} ms per leg-second ({per_leg_s * 4:.1f} ms per 4 s window),"
        f" {per_step:.2f} ms per batched step of {gate.chunks / gate.steps:.1f} legs;"
        f" speech scored {gated['speech']['scored']}/{energy['speech']['scored']}"
    )


def test_gate_batches_legs_and_keeps_their_state_apart(models_dir: Path) -> None:
    gate = VadGate(SileroVad(models_dir / _onnx_name(models_dir)), 4, 256, poll_s=3600)
    try:
        gate.close()  # stepped by hand below
        rows = np.array([0, 1, 2], np.intp)
        for r in rows:
            gate.reset(int(r), 0)
        x = np.zeros((3, 160), np.float32)
        for tick in range(16):  # 2560 samples = 10 chunks per leg
            gate.write(rows, tick, x)
        steps = 0
        while gate.step_once():
            steps += 1
        assert steps == 10 and gate.chunks == 30  # three legs per batched step
        assert all(gate.settled(int(r)) == 16 for r in rows)
        gate.reset(1, 16)  # a new leg on row 1 starts from scratch
        marks = gate.marks(1, 16, 4)
        assert gate.settled(1) == 16 and marks is not None and not marks.any()
        gate.remove(2)  # e.g. the agent's leg: not gated
        assert gate.settled(2) is None and gate.marks(2, 0, 4) is None
    finally:
        gate.close()


def _onnx_name(models_dir: Path) -> str:
    return next(p.name for p in models_dir.iterdir() if p.suffix == ".onnx")
