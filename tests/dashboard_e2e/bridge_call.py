"""A real bridge (full wiring, dev fixture models, a speaker cohort so biometrics and the
call embedding are on, evidence kept) in this process, on the dashboard's Redis, and
real SIPREC calls placed into it by SIPp: the way ``tests/e2e/test_evidence_e2e.py``
drives one, for the browser tests."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sip"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from rtp_pcap import FRAME, write_rtp_pcap
from wired_bridge import InProcessBridge

from detectors.bus.evidence import EvidenceSettings
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ, embedding_fixture
from detectors.model_store import ModelSettings
from detectors.speaker.cohort import cohort_path, save_cohort
from detectors.speaker.scoring import Calibration, Cohort, l2_normalise
from detectors.speaker.settings import BiometricsSettings
from native.codec import ulaw_encode
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

I16 = npt.NDArray[np.int16]
__all__ = ["load_speech", "wait_for"]


def marked(speech: I16, dbfs: float = -20.0) -> I16:
    """Real speech with the synthetic-voice fixture's marker tone: the fixture alerts."""
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)


def start_bridge(
    tmp: Path, bus: BusSettings, evidence: EvidenceSettings
) -> tuple[InProcessBridge, Wiring]:
    models = tmp / "models"
    models.mkdir()
    _, manifest = embedding_fixture(tiny=True)  # a cohort turns speaker biometrics on
    dim = manifest.output.embedding_dim or 0
    rows = l2_normalise(np.random.default_rng(5).standard_normal((40, dim)).astype(np.float32))
    save_cohort(
        cohort_path(models, manifest),
        Cohort(rows, 20, Calibration(0.0, 1.0, 100)),
        [f"s{i}" for i in range(40)],
        {},
    )
    base = 39000 + free_udp_port() % 50 * 20
    settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "dev_fixture_models": "tiny",
        }
    )
    # a few seconds of prompts are enough to match (the default 6 s is for real callers)
    voice = BiometricsSettings(min_net_speech_s=2.0, refresh_s=0.2)
    wiring = Wiring(
        settings, bus, ModelSettings(models_dir=models), biometrics=voice, evidence=evidence
    )
    bridge = InProcessBridge(settings, wiring)
    bridge.start()
    return bridge, wiring


def _send(port: int, audio: I16) -> None:
    ulaw = ulaw_encode(audio)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        t0 = time.monotonic()
        for k in range(len(ulaw) // FRAME):
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            header = bytes([0x80, 0]) + (7000 + k).to_bytes(2, "big")
            header += (160 * k).to_bytes(4, "big") + (0xA6E17).to_bytes(4, "big")
            sock.sendto(header + ulaw[k * FRAME : (k + 1) * FRAME], ("127.0.0.1", port))


def place_call(
    bridge: InProcessBridge, workdir: Path, external: I16, agent: I16, seen: set[int]
) -> None:
    """One SIPREC call, blocking until SIPp hangs up: SIPp plays ``external``; ``agent``
    goes to the bridge's port of the agent stream."""
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", external, ssrc=0xCA11E4)
    box: dict[str, Any] = {}
    sipp = threading.Thread(
        target=lambda: box.setdefault(
            "r",
            run_sipp(
                "uac_siprec_long.xml",
                bridge,  # type: ignore[arg-type]
                workdir,
                extra=["-set", "port2", str(free_udp_port())],
                media_port=free_udp_port(),
            ),
        )
    )
    sipp.start()

    def agent_port() -> int | None:
        for call in list(bridge.bridge.controller.calls.values()):
            for leg in list(call.legs.values()):
                if leg.label == "2" and leg.local_port not in seen:
                    return int(leg.local_port)
        return None

    assert wait_for(lambda: agent_port() is not None, 15)
    port = agent_port()
    assert port is not None
    seen.add(port)
    _send(port, agent)
    sipp.join(timeout=60)
    assert getattr(box.get("r"), "returncode", 1) == 0, getattr(box.get("r"), "stderr", "")
