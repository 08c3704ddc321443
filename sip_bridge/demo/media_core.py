"""``callshield demo --media-core``: live calls through the native media core alone.

What exists today is the media core, so that is what the demo runs, for real: several
calls' legs are sent as µ-law RTP over UDP on 127.0.0.1, each through a seeded
impairment relay (clean, lossy, jittery, reordering/duplicating), received by the
native ingest thread (epoll + recvmmsg, kernel timestamps), de-jittered per leg and
pulled in one batch call every 20 ms. It prints what each leg's jitter buffer saw and
how faithfully the audio that would reach the detectors matches what was sent.

With a synthetic-voice model installed (``callshield models train-synthetic``, or any
installed non-fixture synthetic_voice model), it then also places genuine calls (real
speech) and synthetic ones (espeak-ng) through the media core and the detector runtime
and prints the alerts they raise (``sip_bridge.demo_detect``); without one it says how
to install one.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native.codec import build_rtp, ulaw_decode, ulaw_encode
from native.ingest import Ingest
from sip_bridge.impair import ImpairmentConfig, ImpairRelay

FRAME_NS = 20_000_000
PROFILES: dict[str, ImpairmentConfig] = {
    "clean": ImpairmentConfig(seed=1),
    "2% loss": ImpairmentConfig(seed=2, loss=0.02),
    "bursty loss": ImpairmentConfig(seed=3, loss=0.01, burst_enter=0.01, burst_exit=0.3),
    "40 ms jitter": ImpairmentConfig(seed=4, jitter=0.04),
    "reorder + dup": ImpairmentConfig(seed=5, reorder=0.03, reorder_delay=0.03, duplicate=0.03),
}


def find_speech(explicit: Path | None) -> list[Path]:
    """Real speech for the calls: --speech-dir, the project's shared data, or Debian's
    asterisk-core-sounds-en-wav (installed by .ci/install.sh)."""
    candidates: list[Path] = [explicit] if explicit else []
    env = os.environ.get("CALLSHIELD_SHARED")
    if env:
        candidates.append(Path(env) / "data/speech/asterisk_prompts/en")
    repo = Path(__file__).resolve().parents[2]
    candidates += [
        repo.parent / "shared/data/speech/asterisk_prompts/en",
        Path("/usr/share/asterisk/sounds/en_US_f_Allison"),
    ]
    for folder in candidates:
        if folder.is_dir():
            files = sorted(p for p in folder.glob("*.wav") if _is_8k_mono16(p))
            if files:
                return files
    return []


def _is_8k_mono16(path: Path) -> bool:
    try:
        with wave.open(str(path)) as w:
            return bool(
                w.getframerate() == 8000 and w.getsampwidth() == 2 and w.getnchannels() == 1
            )
    except (wave.Error, EOFError, OSError):
        return False


def leg_audio(files: list[Path], leg: int, seconds: float) -> npt.NDArray[np.int16]:
    """Concatenated speech (or, with no speech installed, a gliding tone) for one leg."""
    n = int(seconds * 8000)
    if not files:
        t = np.arange(n) / 8000
        return (6000 * np.sin(2 * np.pi * (300 + 40 * leg) * t * (1 + t / 20))).astype(np.int16)
    parts, total, k = [], 0, leg * 7
    while total < n:
        with wave.open(str(files[k % len(files)])) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        parts.append(pcm)
        total += len(pcm)
        k += 1
    return np.concatenate(parts)[:n]


@dataclass
class Leg:
    name: str
    stream_id: int
    relay: ImpairRelay
    source: npt.NDArray[np.int16]
    received: npt.NDArray[np.int16]
    mask: npt.NDArray[np.bool_]


def _sender(legs: list[Leg], stop: threading.Event, start_ns: int) -> None:
    """Paced µ-law RTP for every leg from one thread, 20 ms apart in real time."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payloads = [ulaw_encode(leg.source) for leg in legs]
    frames = len(legs[0].source) // 160
    for i in range(frames):
        due = start_ns + i * FRAME_NS
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0 and stop.wait(delay):
            break
        for k, leg in enumerate(legs):
            datagram = build_rtp(
                payloads[k][i * 160 : (i + 1) * 160],
                seq=(1000 + i) & 0xFFFF,
                ts=(i * 160) & 0xFFFFFFFF,
                ssrc=0x5EED0000 + k,
                marker=i == 0,
            )
            sock.sendto(datagram, leg.relay.address)
    sock.close()


def run(args: argparse.Namespace) -> int:
    files = find_speech(args.speech_dir)
    print(f"speech: {len(files)} real recordings" if files else "speech: none found, using tones")
    profiles = list(PROFILES.items())
    stop, interrupted = threading.Event(), threading.Event()

    def on_sigint(*_: object) -> None:
        interrupted.set()
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    samples = int(args.seconds * 8000)
    with Ingest(max_streams=2 * args.calls) as ingest:
        legs: list[Leg] = []
        for call in range(args.calls):
            profile, config = profiles[call % len(profiles)]
            for side in ("caller", "agent"):
                sid = ingest.add_stream(0, max_delay_ms=300)
                relay = ImpairRelay(config, forward=ingest.local_address(sid))
                relay.start()
                source = leg_audio(files, len(legs), args.seconds)
                legs.append(
                    Leg(
                        f"call {call + 1} {side} ({profile})",
                        sid,
                        relay,
                        source,
                        np.zeros(samples + 16000, np.int16),
                        np.zeros(samples + 16000, bool),
                    )
                )
        start = time.monotonic_ns()
        sender = threading.Thread(target=_sender, args=(legs, stop, start), daemon=True)
        sender.start()
        print(
            f"{len(legs)} legs on 127.0.0.1 through impairment relays; "
            f"{args.seconds:.0f} s of audio each (Ctrl-C stops early)"
        )
        _playout(ingest, legs, stop, start, samples)
        stop.set()
        sender.join()
        _report(ingest, legs)
        for leg in legs:
            leg.relay.close()
    if interrupted.is_set():
        return 0
    return _detections(args, files)


def _detections(args: argparse.Namespace, files: list[Path]) -> int:
    """The detection part: only with a synthetic-voice model installed."""
    from sip_bridge import demo_detect

    print()
    detectors = demo_detect.installed_synthetic_detectors(args.models_dir)
    if not detectors:
        speaker = demo_detect.speaker_model_installed(args.models_dir)
        print(
            "detections: no synthetic-voice model is installed, so this demo showed the "
            "media core only."
            + (" (A speaker model is installed; it needs watchlists in Redis.)" if speaker else "")
        )
        print(
            "  to see detections: `callshield models train-synthetic` (needs the convert "
            "extra), or `callshield models install MODEL.onnx`; then run the demo again."
        )
        return 0
    names = ", ".join(f"{d.spec.name} {d.spec.version}" for d in detectors)
    print(f"detections with {names}: genuine (recorded) and synthetic (espeak-ng) calls, live")
    seconds = min(args.seconds, 8.0)  # long enough for a few windows of every model
    speech = [leg_audio(files, 3 + 5 * i, seconds) for i in range(args.detection_calls)]
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    calls = demo_detect.demo_calls(speech, seconds, args.detection_calls)
    alerts = demo_detect.run_calls(detectors, calls, stop, args.detector_deadline)
    print(demo_detect.report(calls, alerts))
    return 0


def _playout(
    ingest: Ingest, legs: list[Leg], stop: threading.Event, start: int, samples: int
) -> None:
    """The 20 ms clock: one batch pull for every leg; keep the real samples per leg."""
    by_id = {leg.stream_id: leg for leg in legs}
    tick = 0
    written = {leg.stream_id: 0 for leg in legs}
    deadline = start + int((samples / 8000 + 0.5) * 1e9)
    while not stop.is_set() and time.monotonic_ns() < deadline:
        due = start + tick * FRAME_NS
        pause = (due - time.monotonic_ns()) / 1e9
        if pause > 0:
            time.sleep(pause)
        frames = ingest.pull_all(time.monotonic_ns())
        for row, sid in enumerate(frames.ids):
            leg = by_id[int(sid)]
            info = frames.infos[row]
            if info["pos"] < 0:
                continue
            n = int(info["samples"])
            at = written[leg.stream_id]
            if at + n <= len(leg.received):
                leg.received[at : at + n] = frames.pcm[row, :n]
                spu = n // 8
                for k in range(8):
                    leg.mask[at + k * spu : at + (k + 1) * spu] = bool(info["real_mask"] >> k & 1)
                written[leg.stream_id] = at + n
        tick += 1


def _report(ingest: Ingest, legs: list[Leg]) -> None:
    print()
    head = (
        f"{'leg':38} {'recv':>5} {'lost':>4} {'late':>4} {'dup':>4} {'reord':>5} "
        f"{'conceal%':>8} {'target':>6} {'wait p50/p99 ms':>15} {'match':>6}"
    )
    print(head)
    print("-" * len(head))
    for leg in legs:
        s = ingest.stream_stats(leg.stream_id)
        hist = np.asarray(s["wait_hist"], dtype=np.float64)
        p50, p99 = (_hist_pct(hist, q) for q in (0.5, 0.99))
        real = np.flatnonzero(leg.mask)
        span = leg.mask[real[0] : real[-1] + 1] if real.size else leg.mask[:0]
        conceal = 100.0 * float(np.mean(~span)) if span.size else 0.0
        match = _match_ratio(leg)
        print(
            f"{leg.name:38} {s['packets_received']:5d} {s['packets_lost']:4d} "
            f"{s['packets_late']:4d} {s['packets_duplicate']:4d} {s['packets_reordered']:5d} "
            f"{conceal:8.2f} {s['target_delay_ms']:6d} {p50:7.0f}/{p99:<7.0f} {match:6.1%}"
        )
    lat = ingest.latency()
    print()
    print(
        "arrival (kernel timestamp) -> jitter buffer, all legs: "
        + ", ".join(f"p{q:g} {lat.percentile_ns(q / 100) / 1000:.1f} us" for q in (50, 99, 99.9))
    )
    print(
        "match: share of the samples the buffer marked as real that equal the sent audio "
        "(µ-law decoded) at the position their RTP timestamp names."
    )


def _hist_pct(hist: npt.NDArray[np.float64], q: float) -> float:
    total = hist.sum()
    if not total:
        return 0.0
    return float(np.searchsorted(np.cumsum(hist), q * total))


def _match_ratio(leg: Leg) -> float:
    """Align received real audio with the source by the best lag, then compare."""
    ref = ulaw_decode(ulaw_encode(leg.source))
    got, mask = leg.received, leg.mask
    real = np.flatnonzero(mask)
    if real.size == 0:
        return 0.0
    best = 0.0
    first = int(real[0])
    for lag in range(first - 1600, first + 1, 160):  # playout starts after some prefetch
        idx = real[real - lag < len(ref)]
        idx = idx[idx - lag >= 0]
        if idx.size:
            best = max(best, float(np.mean(got[idx] == ref[idx - lag])))
    return best
