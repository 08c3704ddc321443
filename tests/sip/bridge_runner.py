"""Run a real bridge (SIP on UDP/TCP, native ingest, playout thread) in a background
thread for the peer tests, and drive SIPp against it; everything on 127.0.0.1 and
bounded in time."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import threading
import time
import wave
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from sip_bridge.bridge import Bridge
from sip_bridge.calls import Call, MemoryPublisher
from sip_bridge.settings import Settings
from sip_bridge.sinks import CaptureSink

T = TypeVar("T")
SCENARIOS = Path(__file__).parent / "scenarios"


class RunningBridge:
    def __init__(self, **settings: object) -> None:
        base = random.Random().randrange(30000, 38000, 100)
        values = {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 99}",
            "drain_timeout_s": 3.0,
            "api_listen": "127.0.0.1:0",
            **settings,
        }
        self.sink = CaptureSink()
        self.publisher = MemoryPublisher()
        self.bridge = Bridge(
            Settings.model_validate(values), sink=self.sink, publisher=self.publisher
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self.bridge.serve())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.bridge.ready.is_set():
            assert time.monotonic() < deadline and self.error is None, self.error
            time.sleep(0.01)

    @property
    def sip_port(self) -> int:
        return self.bridge.server.port

    def on_loop(self, fn: Callable[[], T]) -> T:
        """Run fn on the bridge's event loop (where its state lives) and return its value."""

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=5)

    def calls(self) -> dict[str, Call]:
        """Calls not yet ended: live, or ended and still playing out the audio their
        jitter buffers held (their "ended" event follows that, CallController.end_call)."""
        controller = self.bridge.controller
        return self.on_loop(lambda: {**controller.ending, **controller.calls})

    def events(self) -> list[tuple[str, str]]:
        return [(e.event, e.reason) for e, _ in self.publisher.events]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.bridge.request_stop)
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "bridge did not stop"
        if self.error is not None:
            raise self.error


@contextmanager
def running_bridge(**settings: object) -> Iterator[RunningBridge]:
    bridge = RunningBridge(**settings)
    bridge.start()
    try:
        yield bridge
    finally:
        bridge.stop()


_issued_lock = threading.Lock()
_issued: set[int] = set()


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_udp_port() -> int:
    """An even free port whose next three are free too (SIPp's -mp binds it, the one
    above for RTCP, and the pair above that for video). Ports are handed out at most
    once per test process, so two threads setting up calls at the same moment never
    get the same one; another process can still take it before SIPp binds it, which
    run_sipp answers by retrying."""
    with _issued_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port % 2 or port >= 65000 or any(p in _issued for p in range(port, port + 4)):
                continue
            if all(bindable(p) for p in range(port + 1, port + 4)):
                _issued.update(range(port, port + 4))
                return port


def run_sipp(
    scenario: str,
    bridge: RunningBridge,
    workdir: Path,
    *,
    extra: list[str] | None = None,
    media_port: int | None = None,
    timeout: float = 30.0,
    ip: str = "127.0.0.1",
) -> subprocess.CompletedProcess[str]:
    """Run one SIPp call against the bridge. SIPp picks no port itself, so a port that
    another process took between our probe and SIPp's bind fails it at start-up,
    before any SIP is sent ("Unable to bind ... errno = 98"); that start is retried
    on fresh ports, up to three times. A scenario that has begun is never rerun.
    ``ip``: SIPp's signalling address (127.0.0.1 or ::1; the bridge must listen there)."""
    sipp = shutil.which("sipp")
    assert sipp, "SIPp (Debian sip-tester) is required: .ci/install.sh installs it"
    shutil.copy(SCENARIOS / scenario, workdir / scenario)
    for attempt in range(3):
        cmd = [
            sipp,
            "-sf",
            scenario,
            "-i",
            ip,
            "-p",
            str(free_udp_port()),
            "-mp",
            str(media_port if media_port and attempt == 0 else free_udp_port()),
            "-m",
            "1",
            "-timeout",
            f"{int(timeout)}s",
            "-timeout_error",
            "-nostdin",
            "-trace_err",
            *(extra or []),
            f"[{ip}]:{bridge.sip_port}" if ":" in ip else f"{ip}:{bridge.sip_port}",
        ]
        result = subprocess.run(
            cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout + 10
        )
        if result.returncode == 0 or not _bind_failed(result.stderr):
            return result
    return result


def _bind_failed(stderr: str) -> bool:
    return "Unable to bind" in stderr and "errno = 98" in stderr


def load_speech(shared_dir: Path, seconds: float, skip: int = 0) -> npt.NDArray[np.int16]:
    """Real 8 kHz speech (Asterisk prompts) concatenated to ``seconds``."""
    need = int(seconds * 8000)
    chunks: list[npt.NDArray[np.int16]] = []
    files = sorted((shared_dir / "data/speech/asterisk_prompts/en").glob("*.wav"))[skip:]
    for path in files:
        with wave.open(str(path)) as w:
            if (w.getframerate(), w.getsampwidth(), w.getnchannels()) != (8000, 2, 1):
                continue
            chunks.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"))
        if sum(c.size for c in chunks) >= need:
            break
    audio = np.concatenate(chunks)[:need].astype(np.int16)
    assert audio.size == need
    return audio


def wait_for(condition: Callable[[], bool], limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
