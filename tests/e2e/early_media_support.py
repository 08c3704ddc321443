"""Shared by the early-media end-to-end tests (issue 10): real speech carrying the
synthetic-voice fixture's marker tone (an announcement a synthetic-voice model flags),
a bridge with its full wiring running that fixture, and reading a Redis stream."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import redis
from wired_bridge import InProcessBridge

from detectors.alert_schema import LegRole
from detectors.bus.codec import decode
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ, aasist_fixture
from detectors.model_store import ModelSettings
from detectors.onnx_detector import OnnxDetector
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

I16 = npt.NDArray[np.int16]


def marked(audio: I16, dbfs: float = -20.0) -> I16:
    """``audio`` with the fixture's marker tone added: it scores as synthetic."""
    t = np.arange(audio.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(audio + tone, -32768, 32767).astype(np.int16)


def read(client: redis.Redis, key: str) -> list[object]:
    return [decode(fields) for _, fields in client.xrange(key)]


@contextmanager
def marker_bridge(
    settings: BusSettings, tmp_path: Path, roles: tuple[LegRole, ...] = (LegRole.EXTERNAL,)
) -> Iterator[InProcessBridge]:
    """A running bridge whose synthetic-voice detector is the tiny fixture scoring legs
    of ``roles`` (shipped voice models score external legs only)."""
    base = 41000 + (time.monotonic_ns() // 1000 % 40) * 100
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 99}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "detector_workers": 2,
            "replay_detection": False,
        }
    )
    data, manifest = aasist_fixture(tiny=True)
    wiring = Wiring(
        bridge_settings,
        settings,
        ModelSettings(models_dir=tmp_path / "none"),
        [OnnxDetector(manifest.model_copy(update={"roles": roles}), data)],
    )
    running = InProcessBridge(bridge_settings, wiring)
    running.start()
    try:
        yield running
    finally:
        running.stop()
