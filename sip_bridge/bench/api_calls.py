"""A real bridge in a thread and calls placed through its control API (RTP attach):
what ``callshield bench alert-latency`` drives, and the policy hot-reload test too.

``BridgeHost`` runs ``Bridge.serve()`` (its full wiring: detector runtime, bus, policy
watcher) on its own event loop. ``ApiCall`` creates a monitored call with one external
leg whose source address is given (no probation: every packet counts), sends its µ-law
RTP paced every 20 ms from a thread, notes the wall-clock time (``time.time()``, the
clock Redis stream ids come from) at which the first packet of a marked span left (and,
with ``offset_s``, the last one), and ends the call with DELETE.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.fixture_models import MARKER_HZ
from native.codec import ulaw_encode
from sip_bridge.bridge import Bridge
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

FRAME = 160  # 20 ms of G.711 at 8 kHz


def marked(
    speech: npt.NDArray[np.int16], onset_s: float, dbfs: float = -20.0
) -> npt.NDArray[np.int16]:
    """``speech`` with the synthetic-voice fixture's marker tone from ``onset_s`` on."""
    start = int(onset_s * 8000)
    t = np.arange(speech.size - start) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    out = speech.astype(np.float64)
    out[start:] += tone
    return np.clip(out, -32768, 32767).astype(np.int16)


def utterance(
    speech: npt.NDArray[np.int16], onset_s: float, length_s: float, dbfs: float = -20.0
) -> npt.NDArray[np.int16]:
    """``speech`` with one marked utterance of ``length_s`` from ``onset_s``, then
    silence: the caller stops talking (a suspicious utterance with an end)."""
    out = marked(speech, onset_s, dbfs)
    out[int((onset_s + length_s) * 8000) :] = 0
    return out


class BridgeHost:
    """``Bridge.serve()`` with its wiring, in a thread; ``start`` waits for ready."""

    def __init__(self, settings: Settings, wiring: Wiring) -> None:
        self.wiring = wiring
        self.bridge = Bridge(settings, wiring=wiring)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="bridge", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self.bridge.serve())
        except BaseException as exc:
            self.error = exc

    def start(self, limit_s: float = 120.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + limit_s
        while not self.bridge.ready.is_set() and self.error is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the bridge did not report ready")
            time.sleep(0.02)
        if self.error is not None:
            raise RuntimeError(f"the bridge did not start: {self.error}") from self.error

    @property
    def api_url(self) -> str:
        assert self.bridge.api is not None, "the bridge runs without its API (api_listen)"
        host, port = self.bridge.api.address
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.bridge.request_stop)
        self.thread.join(timeout=30)
        if self.thread.is_alive():
            raise RuntimeError("the bridge did not stop")
        if self.error is not None:
            raise RuntimeError(f"the bridge failed: {self.error}") from self.error


def _request(url: str, token: str, method: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read()
    return json.loads(text) if text else None


@dataclass
class ApiCall:
    """One monitored call: its external leg's audio, and where a marked span starts."""

    api_url: str
    token: str
    audio: npt.NDArray[np.int16]
    onset_s: float | None = None  # where the marker starts in ``audio``
    offset_s: float | None = None  # where it ends (the utterance's last packet before it)
    dnis: str = ""
    call_id: str = ""
    leg_id: str = ""
    sent: int = 0
    onset_wall: float | None = None  # time.time() when the onset's packet left
    offset_wall: float | None = None  # time.time() when the marked span's last packet left
    started_wall: float = 0.0
    port: int = 0  # the leg's RTP port on the bridge
    error: str = ""
    refused: bool = False
    _thread: threading.Thread | None = field(default=None, repr=False)

    def create(self) -> None:
        body = {
            "dnis": self.dnis,
            "legs": [
                {"label": "caller", "role": "external", "codec": "PCMU", "source": "127.0.0.1"}
            ],
        }
        view = _request(f"{self.api_url}/v1/calls", self.token, "POST", body)
        self.call_id = view["call_id"]
        leg = view["legs"][0]
        self.leg_id, self.port = leg["leg_id"], int(leg["rtp"]["port"])

    def start(self) -> None:
        """Create the call, then stream its audio from a thread; a call the bridge
        refuses (503: no capacity) is marked ``refused`` and sends nothing."""
        try:
            self.create()
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise
            self.refused = True
            self.error = exc.read().decode(errors="replace")[:200]  # the bridge's reason
            return
        self._thread = threading.Thread(target=self._send, name=f"rtp-{self.call_id}")
        self._thread.start()

    def _send(self) -> None:
        payload = ulaw_encode(self.audio)
        onset_frame = None if self.onset_s is None else int(self.onset_s * 8000) // FRAME
        last_frame = None if self.offset_s is None else int(self.offset_s * 8000) // FRAME - 1
        ssrc = int.from_bytes(self.call_id.encode()[-4:].rjust(4, b"\0"), "big")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                t0 = time.monotonic()
                self.started_wall = time.time()
                for k in range(len(payload) // FRAME):
                    delay = t0 + k * 0.02 - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    header = bytes([0x80, 0]) + (k & 0xFFFF).to_bytes(2, "big")
                    header += (FRAME * k).to_bytes(4, "big") + ssrc.to_bytes(4, "big")
                    if k == onset_frame:
                        self.onset_wall = time.time()
                    sock.sendto(
                        header + payload[k * FRAME : (k + 1) * FRAME], ("127.0.0.1", self.port)
                    )
                    if k == last_frame:
                        self.offset_wall = time.time()
                    self.sent += 1
        except OSError as exc:
            self.error = str(exc)

    def wait(self, limit_s: float = 120.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout=limit_s)

    def end(self) -> None:
        if self.refused:
            return
        _request(f"{self.api_url}/v1/calls/{self.call_id}", self.token, "DELETE")


def bridge_settings(rtp_base: int, token: str, models: str, **extra: Any) -> Settings:
    """Settings of a bridge for these runs: loopback only, control API on, fixtures."""
    values: dict[str, Any] = {
        "sip_listen": "127.0.0.1:0",
        "rtp_ports": f"{rtp_base}-{rtp_base + 199}",
        "drain_timeout_s": 3.0,
        "http_listen": "127.0.0.1:0",
        "api_listen": "127.0.0.1:0",
        "control_api_token": token,
        "dev_fixture_models": models,
        **extra,
    }
    return Settings.model_validate(values)
