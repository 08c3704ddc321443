"""``callshield demo``: the whole product on this machine with calls placed into it
(:mod:`sip_bridge.demo.live`), or with ``--media-core`` the native media core alone
(:mod:`sip_bridge.demo.media_core`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sip_bridge.demo.media_core import find_speech, leg_audio

__all__ = ["add_parser", "find_speech", "leg_audio", "run"]


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="start everything here, place calls into the bridge, show the alerts"
    )
    parser.add_argument("--seconds", type=float, help="call length (default 20; media core 10)")
    parser.add_argument(
        "--speech-dir", type=Path, help="a speech corpus (MANIFEST.csv) or a folder of WAVs"
    )
    parser.add_argument("--models-dir", type=Path, help="default: $CALLSHIELD_MODELS_DIR")
    parser.add_argument("--once", action="store_true", help="stop after the calls' summary")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--settle", type=float, default=5.0, help="wait for late alerts (s)")
    core = parser.add_argument_group("--media-core: RTP through the native media core only")
    core.add_argument("--media-core", action="store_true", help="the media-core report instead")
    core.add_argument("--calls", type=int, default=5, help="calls, two legs each")
    core.add_argument("--detection-calls", type=int, default=4, help="with a synthetic model")
    core.add_argument(
        "--detector-deadline",
        type=float,
        default=2.0,
        help="s a window may wait and run before it is unavailable (the bridge's 2 s; "
        "raise it on a loaded machine, where a full model misses 2 s and scores nothing)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.media_core:
        from sip_bridge.demo import media_core

        args.seconds = 10.0 if args.seconds is None else args.seconds
        return media_core.run(args)
    from sip_bridge.demo import live

    args.seconds = 20.0 if args.seconds is None else args.seconds
    return live.run(args)
