"""The echo gate with the real frame bank on real speech and espeak-ng prompts through
G.711: external-leg windows that carry only a 10 % echo of the internal leg's prompts
(120 ms and 450 ms later) abstain ``echo`` for voice detectors, windows of the caller's
own speech (with the same echo under it) are scored, non-voice detectors are never
gated, and two people talking over each other are never taken for echo."""

from __future__ import annotations

import subprocess
import wave

import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.echo import EchoGate
from detectors.replay.detector import replay_spec
from detectors.windowing import FrameBank, LegInfo, frames_from_pcm
from native.codec import ulaw_decode, ulaw_encode

I16 = npt.NDArray[np.int16]
PROMPTS = (
    "Thank you for calling. Please hold while we connect you to the next available agent.",
    "For account balances, press one. To report a lost card, press two.",
)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> npt.NDArray[np.float32]:
    """espeak-ng prompts at 8 kHz (sox), as an IVR would play them."""
    folder = tmp_path_factory.mktemp("prompts")
    out = []
    for k, text in enumerate(PROMPTS):
        raw, wav8 = folder / f"p{k}.wav", folder / f"p{k}_8k.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True)
        subprocess.run(
            ["sox", str(raw), "-r", "8000", "-c", "1", "-b", "16", str(wav8)], check=True
        )
        with wave.open(str(wav8)) as w:
            out.append(np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32))
    audio = np.concatenate(out)
    return (audio / np.abs(audio).max() * 0.9 * 32768).astype(np.float32)


def _g711(x: npt.NDArray[np.float32]) -> I16:
    return ulaw_decode(ulaw_encode(np.clip(x, -32768, 32767).astype(np.int16)))


def _run(
    external: I16, internal: I16, specs: list[DetectorSpec], gate: EchoGate
) -> dict[str, list[tuple[float, Abstention | None]]]:
    bank = FrameBank([8000], max_legs=4, ring_s=12.0)
    bank.echo = gate
    bank.add_leg(1, LegInfo("c", "ext", LegRole.EXTERNAL))
    gate.add_target("c", 1)
    gate.add_reference("c", 2)  # the internal leg: the gate's reference, never in the bank
    plans = [bank.plan(s) for s in specs]
    ids = np.array([1, 2], np.int32)
    out: dict[str, list[tuple[float, Abstention | None]]] = {s.name: [] for s in specs}
    for t in range(min(external.size, internal.size) // 160):
        pcm = np.stack([external[t * 160 : (t + 1) * 160], internal[t * 160 : (t + 1) * 160]])
        gate.push(ids, pcm, bank.tick)
        bank.push(ids, pcm, frames_from_pcm(pcm))
        for plan in plans:
            for job in plan.collect(0.0):
                out[plan.spec.name].append((job.key.start_s, job.abstained))
    return out


@pytest.mark.parametrize("lag_ms", [120, 450])
def test_echo_only_windows_abstain_and_the_callers_speech_is_scored(
    prompts: npt.NDArray[np.float32], speech_8k: I16, lag_ms: int
) -> None:
    n = prompts.size
    internal = np.zeros(2 * n, np.float32)
    internal[:n] = prompts  # the IVR talks, then the agent listens
    lag = lag_ms * 8
    external = np.zeros(2 * n, np.float32)
    external[lag:] += 0.1 * internal[:-lag]  # 10 % echo through the speakerphone
    external[n + 8000 :] += speech_8k[: n - 8000].astype(np.float32)  # the caller answers
    voice = replay_spec(window_s=2.0, hop_s=1.0)
    vad = DetectorSpec("vad", "1", Dimension.SPEECH_ACTIVITY, 8000, 16000, 8000)
    gate = EchoGate()
    out = _run(_g711(external), _g711(internal), [voice, vad], gate)
    t_prompts = n / 8000
    echo_part = [a for s, a in out[voice.name] if s >= 1.0 and s + 2.0 <= t_prompts - 0.5]
    caller_part = [a for s, a in out[voice.name] if s >= t_prompts + 1.5]
    assert echo_part and caller_part
    share = sum(a is Abstention.ECHO for a in echo_part) / len(echo_part)
    assert share >= 0.8, (share, echo_part)
    assert all(a is None for a in caller_part), caller_part
    assert all(a is not Abstention.ECHO for _, a in out["vad"])


def test_two_people_talking_are_not_echo(speech_8k: I16) -> None:
    n = speech_8k.size // 2
    caller, agent = speech_8k[:n], speech_8k[n : 2 * n]
    gate = EchoGate()
    voice = replay_spec(window_s=2.0, hop_s=1.0)
    out = _run(caller, agent, [voice], gate)
    assert out[voice.name]
    assert gate.stats.evaluations > 100 and gate.stats.echo_spans == 0
    assert all(a is not Abstention.ECHO for _, a in out[voice.name])
