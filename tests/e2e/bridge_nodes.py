"""Bridge processes for the multi-node tests: each a real ``callshield bridge`` with its
log in a file, its own SIP/HTTP ports and RTP range, and a readiness probe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

from detectors.bus.redis_server import free_port, free_udp_tcp_port
from detectors.fixture_models import MARKER_HZ


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sip_bridge.cli", *args]


class Proc:
    """A process with its log in a file (never a pipe nobody drains)."""

    def __init__(
        self, name: str, cmd: list[str], env: dict[str, str], logs: Path, cwd: Path | None = None
    ) -> None:
        self.name, self.log = name, logs / f"{name}.log"
        with self.log.open("wb") as out:
            self.p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Node:
    """One bridge node (tiny fixture models); ``extra`` adds or overrides settings."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        tmp: Path,
        rtp_base: int,
        rtp_ports: int,
        extra: dict[str, str],
    ) -> None:
        self.name, self.sip_port, self.http_port = name, free_udp_tcp_port(), free_port()
        node_env = {
            **env,
            "CALLSHIELD_NODE_ID": name,
            "CALLSHIELD_STATE_DIR": str(tmp / name),
            "CALLSHIELD_SIP_LISTEN": f"127.0.0.1:{self.sip_port}",
            "CALLSHIELD_RTP_PORTS": f"{rtp_base}-{rtp_base + rtp_ports - 1}",
            "CALLSHIELD_HTTP_LISTEN": f"127.0.0.1:{self.http_port}",
            "CALLSHIELD_API_LISTEN": "",
            "CALLSHIELD_DEV_FIXTURE_MODELS": "tiny",
            **extra,
        }
        self.proc = Proc(name, cli("bridge"), node_env, tmp)

    def ready(self) -> bool:
        assert self.proc.p.poll() is None, self.proc.tail()
        try:
            return httpx.get(f"http://127.0.0.1:{self.http_port}/ready", timeout=1).is_success
        except httpx.HTTPError:
            return False


def marked(speech: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    """``speech`` with the fixture models' marker tone at -20 dBFS (it alerts)."""
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (-20 / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)
