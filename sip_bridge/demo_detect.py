"""``callshield demo`` with a synthetic-voice model installed: live calls through the
media core *and* the detectors.

Each call is one external leg sent as µ-law RTP over UDP on 127.0.0.1 in real time,
received by the native ingest thread, pulled every 20 ms in one batch and handed to the
detector runtime (frame bank, window plans, micro-batched ONNX Runtime, fusion) as the
bridge's playout tick does. Genuine calls play real speech from the shared corpus (or
Debian's Asterisk prompts); synthetic calls play speech that espeak-ng generates at the
start of the demo, from different voices. The report says, per call, how many windows
were scored, the highest score, and the alerts fusion raised, at their offsets.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import Detector
from detectors.eval.audio import read_audio, resample, to_int16
from detectors.model_store import ModelSettings, ModelStore
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig
from native.codec import build_rtp, ulaw_encode
from native.ingest import Ingest
from sip_bridge.detector_lanes import DetectorConcurrency
from sip_bridge.replay.engine import Capture
from sip_bridge.replay.report import alerts_json
from sip_bridge.settings import Settings

FRAME_NS = 20_000_000
SENTENCES = (
    "Hello, this is John calling about my account. I need to move some money today.",
    "Hi, I am the account holder. Please reset my password and read me the code.",
    "Good morning. I would like to confirm the wire transfer to the new beneficiary.",
    "This is your manager. Approve the payment now, I will explain everything later.",
)
VOICES = ("en-us", "en-gb+f3", "en-us+m3", "en-gb-x-rp+f2")


@dataclass(slots=True)
class DemoCall:
    name: str
    kind: str  # genuine | synthetic (or anything a caller of run_calls names)
    source: str
    audio: npt.NDArray[np.int16]  # 8 kHz
    stream_id: int = -1
    call_id: str = ""
    sent: int = 0
    results: list[tuple[float, float | None]] = field(default_factory=list)


def installed_synthetic_detectors(models_dir: Path | None = None) -> list[Detector]:
    """The installed (non-fixture) synthetic_voice detectors; [] without any."""
    settings = ModelSettings(models_dir=models_dir) if models_dir else ModelSettings()
    installed = ModelStore(settings.models_dir).installed()
    if not any(
        not i.manifest.fixture and i.manifest.dimension is Dimension.SYNTHETIC_VOICE
        for i in installed
    ):
        return []
    from sip_bridge.wiring import load_detectors

    return [d for d in load_detectors(settings) if d.spec.dimension is Dimension.SYNTHETIC_VOICE]


def speaker_model_installed(models_dir: Path | None = None) -> bool:
    settings = ModelSettings(models_dir=models_dir) if models_dir else ModelSettings()
    return any(
        not i.manifest.fixture and i.manifest.output.embedding
        for i in ModelStore(settings.models_dir).installed()
    )


def espeak_speech(text: str, voice: str, seconds: float) -> npt.NDArray[np.int16]:
    """espeak-ng's speech of ``text`` at 8 kHz, repeated with pauses to ``seconds``."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise FileNotFoundError("espeak-ng is not installed (.ci/install.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "tts.wav"
        subprocess.run(
            [espeak, "-v", voice, "-s", "150", "-w", str(wav), text],
            check=True,
            capture_output=True,
            timeout=30,
        )
        x, rate = read_audio(wav)
    pcm = to_int16(resample(x, rate, 8000) * 0.7)
    gap = np.zeros(2400, np.int16)
    need = int(seconds * 8000)
    reps = -(-need // (len(pcm) + len(gap)))
    return np.concatenate([np.concatenate([pcm, gap])] * reps)[:need]


def demo_calls(speech: Sequence[npt.NDArray[np.int16]], seconds: float, n: int) -> list[DemoCall]:
    """``n`` calls alternating genuine (``speech``, real recordings) and synthetic."""
    calls = []
    for i in range(n):
        if i % 2 == 0:
            audio = speech[(i // 2) % len(speech)]
            calls.append(DemoCall(f"call {i + 1}", "genuine", "recorded speech", audio))
        else:
            voice, text = VOICES[(i // 2) % len(VOICES)], SENTENCES[(i // 2) % len(SENTENCES)]
            audio = espeak_speech(text, voice, seconds)
            calls.append(DemoCall(f"call {i + 1}", "synthetic", f"espeak-ng {voice}", audio))
    return calls


def run_calls(
    detectors: Sequence[Detector],
    calls: list[DemoCall],
    stop: threading.Event,
    deadline_s: float = LaneConfig().deadline_s,
) -> list[dict[str, object]]:
    """Play every call live over UDP into the ingest thread and the runtime; returns the
    alerts (folded per alert, with ``raised_at_s``) and fills each call's results.
    ``deadline_s``: how long a window may wait and run before it is unavailable (the
    bridge's 2 s by default; a full model on a loaded machine needs more)."""
    capture = Capture()
    longest = max((d.spec.window_s for d in detectors), default=1.0)
    lanes = DetectorConcurrency.from_settings(Settings())  # as the bridge runs them
    config = RuntimeConfig(
        workers=lanes.workers,
        max_legs=max(2, len(calls)),
        ring_s=2 * longest + 2,
        lanes=lanes.lane(LaneConfig(max_batch=lanes.max_batch, deadline_s=deadline_s)),
    )
    runtime = DetectorRuntime(detectors, capture, config=config)
    runtime.start()  # pre-warm every batch shape
    samples = max(len(c.audio) for c in calls)
    try:
        with Ingest(max_streams=len(calls)) as ingest:
            for i, call in enumerate(calls):
                call.call_id = f"demo-{i + 1}"
                call.stream_id = ingest.add_stream(0, max_delay_ms=300)
                runtime.open_call(call.call_id)
                runtime.add_leg(call.call_id, call.stream_id, "external", LegRole.EXTERNAL)
            start = time.monotonic_ns() + 50_000_000
            sender = threading.Thread(target=_send, args=(ingest, calls, stop, start), daemon=True)
            sender.start()
            tick, end = 0, start + int((samples / 8000 + 0.5) * 1e9)
            while not stop.is_set() and start + tick * FRAME_NS < end:
                pause = (start + tick * FRAME_NS - time.monotonic_ns()) / 1e9
                if pause > 0:
                    time.sleep(pause)
                runtime.on_frames(ingest.pull_all(time.monotonic_ns()))
                tick += 1
            stop.set()
            sender.join()
        runtime.scheduler.wait_idle(max(30.0, deadline_s))  # windows still queued
        for call in calls:
            runtime.end_call(call.call_id)
    finally:
        runtime.close()
    by_call = {c.call_id: c for c in calls}
    for s in capture.scores:
        if s.dimension is Dimension.SYNTHETIC_VOICE and s.call_id in by_call:
            by_call[s.call_id].results.append((s.window_end_s, s.score))
    return alerts_json(capture.alerts)


def _send(ingest: Ingest, calls: list[DemoCall], stop: threading.Event, start: int) -> None:
    payloads = [ulaw_encode(c.audio) for c in calls]
    targets = [ingest.local_address(c.stream_id) for c in calls]
    frames = max(len(p) for p in payloads) // 160
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for k in range(frames):
            delay = (start + k * FRAME_NS - time.monotonic_ns()) / 1e9
            if delay > 0 and stop.wait(delay):
                return
            for i, call in enumerate(calls):
                chunk = payloads[i][160 * k : 160 * (k + 1)]
                if len(chunk) == 160:
                    rtp = build_rtp(chunk, seq=k, ts=160 * k, ssrc=0xDE70 + i, marker=k == 0)
                    sock.sendto(rtp, targets[i])
                    call.sent += 1


def report(calls: list[DemoCall], alerts: list[dict[str, object]]) -> str:
    lines = [
        f"{'call':8} {'kind':10} {'audio':22} {'windows':>7} {'peak':>5}  alerts (synthetic_voice)"
    ]
    lines.append("-" * len(lines[0]))
    for c in calls:
        scored = [s for _, s in c.results if s is not None]
        mine = [a for a in alerts if a["call_id"] == c.call_id]
        cell = (
            ", ".join(f"{a['band']} at {a['raised_at_s']:.1f} s" for a in mine) if mine else "none"
        )
        peak = f"{max(scored):.2f}" if scored else "-"
        lines.append(
            f"{c.name:8} {c.kind:10} {c.source[:22]:22} {len(c.results):7d} {peak:>5}  {cell}"
        )
    return "\n".join(lines)
