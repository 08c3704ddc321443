"""``callshield replay``: re-check a recorded call through the live pipeline.

    callshield replay call.pcap [--external-ssrc 0x1234] [--internal-ssrc 0x5678]
    callshield replay --external caller.wav [--internal agent.wav]
    callshield replay stereo.wav --speed 0 --json

The recording's legs go through the native jitter buffer, the detector runtime and
fusion in virtual time (``sip_bridge.replay.engine``) with the installed models (or
``--dev-fixture-models``), and the report shows every dimension's scores over the call,
each leg's loss and concealment, and the alerts a live call would have raised, with
their offsets. ``--speed`` paces it (1: real time, the default; 20: twenty times
faster; 0: as fast as the CPU allows): the result is the same at any speed.
``--redis [URL]`` also publishes the call's events, scores and alerts to Redis like a
live call (URL, else ``REDIS_URL`` or the embedded server).

A capture with SIP signalling (over UDP) may hold several calls: SIP is grouped by
Call-ID, RTP streams are tied to calls by each call's SDP (``sip_bridge.replay.sip_calls``)
and every call is replayed on its own through the same pipeline, one report per call;
streams no call explains are listed as unassociated. Without SIP, the RTP streams are
one call (legs by SSRC).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from detectors.contract import Detector
from detectors.model_store import ModelSettings
from sip_bridge.replay.pcap import CaptureError
from sip_bridge.replay.sip_calls import CaptureCalls, read_capture_calls
from sip_bridge.replay.sources import (
    Recording,
    ReplayInputError,
    is_capture,
    read_audio_legs,
    read_capture,
)

log = logging.getLogger(__name__)


def _ssrc(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an SSRC: {text!r} (decimal or 0x hex)") from None
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"SSRC out of range: {text!r}")
    return value


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a speed: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("speed must be >= 0 (0: as fast as possible)")
    return value


def add_parser(sub: Any, name: str) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="replay a recorded call (pcap of RTP, or audio per leg) through the detectors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", nargs="?", type=Path, help="pcap/pcapng of RTP, or an audio file")
    p.add_argument("--external", type=Path, help="audio of the external (caller) leg")
    p.add_argument("--internal", type=Path, help="audio of the internal (agent) leg")
    p.add_argument("--external-ssrc", type=_ssrc, help="pcap: the external leg's SSRC")
    p.add_argument("--internal-ssrc", type=_ssrc, help="pcap: the internal leg's SSRC")
    p.add_argument("--speed", type=_speed, default=1.0, help="1 = real time, 0 = unpaced")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--step", type=float, default=1.0, help="text timeline: seconds per row")
    p.add_argument("--call-id", help="default: derived from the recording (stable)")
    p.add_argument("--node-id", default="replay")
    p.add_argument("--models-dir", type=Path, help="default: CALLSHIELD_MODELS_DIR")
    p.add_argument(
        "--dev-fixture-models",
        nargs="?",
        const="tiny",
        choices=("tiny", "full"),
        default="",
        help="add the runtime's fixture models (random weights; NOT detectors)",
    )
    p.add_argument(
        "--redis",
        nargs="?",
        const="",
        default=None,
        metavar="URL",
        help="also publish events, scores and alerts (URL, else REDIS_URL or embedded)",
    )
    p.set_defaults(run=run)


def load_recording(args: argparse.Namespace) -> Recording | CaptureCalls:
    if args.file is not None and is_capture(args.file):
        if args.external or args.internal:
            raise ReplayInputError("give a capture or --external/--internal audio, not both")
        calls = read_capture_calls(args.file, args.external_ssrc, args.internal_ssrc)
        if calls is not None:
            if args.call_id and len(calls.calls) > 1:
                raise ReplayInputError(
                    f"--call-id names one call; {args.file} holds {len(calls.calls)}"
                )
            return calls
        return read_capture(args.file, args.external_ssrc, args.internal_ssrc)
    if args.external_ssrc is not None or args.internal_ssrc is not None:
        raise ReplayInputError("--external-ssrc/--internal-ssrc apply to captures only")
    return read_audio_legs(args.external, args.internal, args.file)


def run(args: argparse.Namespace) -> int:
    try:
        loaded = load_recording(args)
    except (ReplayInputError, CaptureError, OSError) as exc:
        print(f"callshield replay: {exc}", file=sys.stderr)
        return 2
    recordings = [loaded] if isinstance(loaded, Recording) else loaded.calls
    from sip_bridge.wiring import load_detectors

    models = ModelSettings(models_dir=args.models_dir) if args.models_dir else ModelSettings()
    try:
        detectors = load_detectors(models, args.dev_fixture_models)
    except ValueError as exc:  # e.g. two models of one dimension (CALLSHIELD_DETECTOR_MODELS)
        print(f"callshield replay: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if args.redis is None:
            results = [_replay(r, detectors, args, stop) for r in recordings if not stop.is_set()]
        else:
            results = _replay_publishing(recordings, detectors, args, stop, models)
    finally:
        signal.signal(signal.SIGINT, previous)
    from sip_bridge.replay import report

    if isinstance(loaded, Recording):
        doc, text = report.to_json(results[0]), report.to_text(results[0], args.step)
    else:
        doc = report.calls_to_json(loaded, results)
        text = report.calls_to_text(loaded, results, args.step)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    return 130 if stop.is_set() else 0


def _replay(
    recording: Recording,
    detectors: list[Detector],
    args: argparse.Namespace,
    stop: threading.Event,
    **kw: Any,
) -> Any:
    from sip_bridge.replay.engine import replay

    return replay(
        recording,
        detectors,
        speed=args.speed,
        call_id=args.call_id,
        node_id=args.node_id,
        stop=stop,
        **kw,
    )


def _replay_publishing(
    recordings: list[Recording],
    detectors: list[Detector],
    args: argparse.Namespace,
    stop: threading.Event,
    models: ModelSettings,
) -> list[Any]:
    """As a live call: events, scores and alerts through the bus publisher (its own
    outbox in a temporary directory, flushed before the command returns), and the
    speaker biometrics stage when a speaker model and its cohort are installed."""
    from detectors.bus.connect import resolve_url, sync_client
    from detectors.bus.keys import Keys
    from detectors.bus.publisher import AlertPublisher
    from detectors.bus.settings import BusSettings
    from sip_bridge.biometrics import build_biometrics

    base = BusSettings(node_id=args.node_id)
    url = args.redis or resolve_url(base)
    with tempfile.TemporaryDirectory(prefix="callshield-replay-") as state:
        bs = base.model_copy(update={"redis_url": SecretStr(url), "state_dir": Path(state)})
        client = sync_client(bs, url)
        bus = AlertPublisher(client, bs)
        bio = build_biometrics(detectors, models.models_dir, client, Keys(bs.key_prefix))
        bus.start()
        if bio is not None:
            bio.start()
        try:
            return [
                _replay(
                    recording,
                    detectors,
                    args,
                    stop,
                    forward=bus,
                    stage=bio.stage if bio is not None else None,
                )
                for recording in recordings
                if not stop.is_set()
            ]
        finally:
            if bio is not None:
                bio.close()
            bus.close(timeout_s=10.0)
            client.close()
