"""WHIP publishers for ``callshield bench webrtc``, run in their own process so their
encoding and ICE/DTLS work never lands on the measured server's loop or CPU.

``python -m sip_bridge.bench.webrtc_publishers`` reads one JSON job from stdin
(endpoint, token, publishers, seconds, codec, speech_dir), publishes every session
(aiortc, real speech, one leg each), prints ``{"ready": ...}`` once all are connected,
sends for ``seconds``, prints ``{"stopped": ...}``, lets the receivers drain, DELETEs
every resource and prints the result (frames sent per publisher, setup times, CPU).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sip_bridge.bench.whip_client import WhipError, WhipPublisher, publish
from sip_bridge.demo import find_speech, leg_audio

DRAIN_S = 1.0  # after the last frame: the receivers' jitter buffers play out


async def run_job(job: dict[str, Any]) -> dict[str, Any]:
    files = find_speech(Path(job["speech_dir"]) if job.get("speech_dir") else None)
    n, seconds = int(job["publishers"]), float(job["seconds"])
    codecs = (str(job["codec"]),)
    pubs: list[WhipPublisher] = []
    setup_ms: list[float] = []
    refused: dict[str, int] = {}
    cpu0 = time.process_time()
    async with httpx.AsyncClient(timeout=15) as client:

        async def one(i: int) -> None:
            await asyncio.sleep(i * 0.05)  # staggered, as calls arrive
            t0 = time.monotonic()
            try:
                pub = await publish(
                    client, job["endpoint"], job["token"], leg_audio(files, i, 30.0), codecs=codecs
                )
            except WhipError as exc:
                refused[str(exc.status)] = refused.get(str(exc.status), 0) + 1
                return
            deadline = time.monotonic() + 10
            while pub.pc.connectionState != "connected" and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            setup_ms.append((time.monotonic() - t0) * 1000)
            pubs.append(pub)

        await asyncio.gather(*(one(i) for i in range(n)))
        _say({"ready": len(pubs), "refused": refused})
        sent0 = [p.track.frames_sent for p in pubs]
        await asyncio.sleep(seconds)
        for p in pubs:
            p.track.stop()
        _say({"stopped": True})
        frames = [p.track.frames_sent for p in pubs]
        await asyncio.sleep(DRAIN_S)
        deleted = [await p.delete(client) for p in pubs]
    return {
        "published": len(pubs),
        "refused": refused,
        "setup_ms": setup_ms,
        "frames_sent": frames,
        "frames_sent_before_window": sent0,
        "deleted_ok": sum(1 for s in deleted if s == 200),
        "cpu_s": time.process_time() - cpu0,
    }


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    job = json.loads(sys.stdin.readline())
    _say({"result": asyncio.run(run_job(job))})


if __name__ == "__main__":
    main()
