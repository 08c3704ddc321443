"""SIP load: SIPp places calls with RTP (a pcap of real speech) against a real bridge,
ramping the call rate until setup, capacity or media degrades.

The bridge runs in this process (its asyncio loop in a thread, the native receiver and
the playout thread as in production) with a sink that counts, per leg, the frames
played from received audio and the frames concealed between two received ones (loss
or lateness inside the call). Each step runs SIPp at ``rate`` calls per second for
``--step-seconds``; every call plays ``--hold`` seconds of speech, then hangs up. A
second SIPp sends SIPREC INVITEs (two streams + metadata) at ``--siprec-share`` of the
rate alongside. Per step: calls set up per second (bridge side, from the call events),
concurrent calls held (peak), INVITE->200 latency p50/p99 as SIPp measured it
(``rtd``, per call from ``-trace_rtt``) for plain SIP and SIPREC, failed calls, frames
lost and late playout ticks. The ramp stops at the first step that degrades: any
failed call, setup rate under 95 % of the target, frames lost above ``--max-loss``, or
a setup p99 above ``--max-setup-p99-ms`` (DESIGN §8: 20 ms). The knee is the last step
that held; the first step is the baseline of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from native.ingest import PulledFrames
from native.ingest_types import LegConfig, frame_flag_name
from sip_bridge.bench.report import summarize
from sip_bridge.bench.sipp_files import (
    read_rtt,
    read_stat,
    scenario,
    setup_times_from_trace,
    write_pcap,
)
from sip_bridge.bridge import Bridge
from sip_bridge.calls import MemoryPublisher
from sip_bridge.demo import find_speech, leg_audio
from sip_bridge.settings import Settings

_FLAGS = [frame_flag_name(i) for i in range(8)]
NORMAL, CONCEALED = _FLAGS.index("normal"), _FLAGS.index("concealed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", default="5,10,20,40,80,160", help="calls/s per step")
    parser.add_argument("--step-seconds", type=float, default=10.0)
    parser.add_argument("--hold", type=float, default=4.0, help="seconds of speech per call")
    parser.add_argument("--siprec-share", type=float, default=0.2, help="SIPREC share of rate")
    parser.add_argument("--max-setup-p99-ms", type=float, default=20.0)
    parser.add_argument("--max-loss", type=float, default=0.001, help="frames lost / expected")
    parser.add_argument("--rtp-ports", default="40000-59999")
    parser.add_argument("--speech-dir", type=Path)
    parser.add_argument("--tiny", action="store_true", help="one short step (smoke tests)")


class LossSink:
    """Per leg: frames played from received audio, and frames concealed between two
    received ones (the tail after the last packet is not loss). Vectorised per tick."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, int] = {}
        self._normal = np.zeros(0, np.int64)
        self._pending = np.zeros(0, np.int64)
        self._lost = np.zeros(0, np.int64)
        self._legs: tuple[str, ...] = ()
        self._rows = np.zeros(0, np.intp)

    def on_frames(self, now_ns: int, legs: Sequence[str], frames: PulledFrames) -> None:
        with self._lock:
            if tuple(legs) != self._legs:
                self._legs = tuple(legs)
                for leg in legs:
                    self._slots.setdefault(leg, len(self._slots))
                size = len(self._slots)
                if size > self._normal.size:
                    grow = max(size, 2 * self._normal.size) - self._normal.size
                    self._normal = np.concatenate([self._normal, np.zeros(grow, np.int64)])
                    self._pending = np.concatenate([self._pending, np.zeros(grow, np.int64)])
                    self._lost = np.concatenate([self._lost, np.zeros(grow, np.int64)])
                self._rows = np.array([self._slots[leg] for leg in legs], np.intp)
            flags = frames.infos["flag"][: len(legs)]
            normal = self._rows[flags == NORMAL]
            self._lost[normal] += self._pending[normal]  # concealment that ended in audio
            self._pending[normal] = 0
            self._normal[normal] += 1
            self._pending[self._rows[flags == CONCEALED]] += 1

    def totals(self, legs: Sequence[str]) -> tuple[dict[str, int], int]:
        """(normal frames per leg, frames concealed inside calls) over ``legs``."""
        with self._lock:
            slots = [self._slots[leg] for leg in legs if leg in self._slots]
            normal = {
                leg: int(self._normal[self._slots[leg]]) for leg in legs if leg in self._slots
            }
            return normal, int(self._lost[slots].sum()) if slots else 0


@dataclass
class _Peer:
    name: str
    rate: float
    calls: int
    folder: Path
    proc: subprocess.Popen[bytes] | None = None


def run(args: argparse.Namespace) -> dict[str, Any]:
    sipp = shutil.which("sipp")
    if sipp is None:
        raise SystemExit("SIPp is required (Debian sip-tester; .ci/install.sh installs it)")
    rates = [float(r) for r in str(args.rates).split(",") if r.strip()]
    step_s, hold = float(args.step_seconds), float(args.hold)
    if args.tiny:
        rates, step_s, hold = [4.0], 1.5, 1.0
    speech = find_speech(args.speech_dir)
    sink = LossSink()
    publisher = MemoryPublisher()
    settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": args.rtp_ports,
            "max_dialogs_per_source": 100_000,
            "drain_timeout_s": 2.0,
            "api_listen": "",  # SIP only
        }
    )
    bridge = Bridge(settings, sink=sink, publisher=publisher)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(bridge.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not bridge.ready.is_set():
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the bridge did not start")
        time.sleep(0.01)
    steps: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="callshield-bench-sip-") as tmp:
            work = Path(tmp)
            packets = write_pcap(work / "speech.pcap", leg_audio(speech, 0, hold))
            for name, siprec in (("call.xml", False), ("siprec.xml", True)):
                xml = scenario(
                    siprec=siprec, pcap=str(work / "speech.pcap"), hold_ms=int(hold * 1000) + 200
                )
                (work / name).write_text(xml)
            expected = packets - (LegConfig().probation - 1)  # probation drops the first
            for k, rate in enumerate(rates):
                step = _step(sipp, bridge, publisher, sink, work / f"step{k}", rate, step_s, args)
                step["frames_expected_per_call"] = expected
                _media(step, sink, publisher, expected)
                step["degraded"] = _degraded(step, args)
                steps.append(step)
                if step["degraded"]:
                    break
    finally:
        loop.call_soon_threadsafe(bridge.request_stop)
        thread.join(timeout=30)
    held = [s for s in steps if not s["degraded"]]
    return {
        "benchmark": "sip",
        "config": {
            "rates": rates,
            "step_seconds": step_s,
            "hold_s": hold,
            "siprec_share": args.siprec_share,
            "max_setup_p99_ms": args.max_setup_p99_ms,
            "max_loss": args.max_loss,
            "codec": "PCMU 20 ms, real speech (pcap replayed by SIPp)",
        },
        "baseline": _brief(steps[0]) if steps else None,
        "knee": _brief(held[-1]) if held else None,
        "first_degraded": _brief(steps[-1]) if steps and steps[-1]["degraded"] else None,
        "steps": steps,
    }


def _step(
    sipp: str,
    bridge: Bridge,
    publisher: MemoryPublisher,
    sink: LossSink,
    folder: Path,
    rate: float,
    step_s: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    first_event = len(publisher.events)
    late0 = bridge.media.late_ticks
    siprec_rate = rate * float(args.siprec_share)
    peers = [_Peer("sip", rate, max(1, round(rate * step_s)), folder / "sip")]
    if siprec_rate > 0:
        peers.append(
            _Peer("siprec", siprec_rate, max(1, round(siprec_rate * step_s)), folder / "siprec")
        )
    limit = int(step_s + float(args.hold) + 60)
    started = time.monotonic()
    for peer in peers:
        peer.folder.mkdir(parents=True)
        xml = "siprec.xml" if peer.name == "siprec" else "call.xml"
        shutil.copy(folder.parent / xml, peer.folder / xml)
        cmd = [
            sipp,
            "-sf",
            xml,
            "-i",
            "127.0.0.1",
            "-p",
            str(_free_port()),
            "-mp",
            str(_free_port(even=True)),
            "-r",
            f"{peer.rate:g}",
            "-rp",
            "1000",
            "-m",
            str(peer.calls),
            "-trace_rtt",
            "-rtt_freq",
            "1",
            "-trace_msg",
            "-trace_stat",
            "-stf",
            "stat.csv",
            "-fd",
            "1",
            "-trace_err",
            "-timeout",
            f"{limit}s",
            "-timeout_error",
            "-nostdin",
            "-nr",
            f"127.0.0.1:{bridge.server.port}",
        ]
        peer.proc = subprocess.Popen(
            cmd,
            cwd=peer.folder,
            stdout=subprocess.DEVNULL,
            stderr=(peer.folder / "stderr.txt").open("wb"),
        )
    codes = {}
    for peer in peers:
        assert peer.proc is not None
        try:
            codes[peer.name] = peer.proc.wait(timeout=limit + 15)
        except subprocess.TimeoutExpired:
            peer.proc.kill()
            codes[peer.name] = peer.proc.wait()
    wall = time.monotonic() - started
    end = time.monotonic() + 10
    while bridge.controller.calls and time.monotonic() < end:
        time.sleep(0.05)
    events = publisher.events[first_event:]
    out: dict[str, Any] = {"rate": rate, "siprec_rate": siprec_rate, "wall_s": wall}
    for peer in peers:
        stat = read_stat(peer.folder / "stat.csv")
        out[peer.name] = {
            "calls": peer.calls,
            "sipp_exit": codes[peer.name],
            "sipp_errors": _tail(peer.folder / "stderr.txt") if codes[peer.name] else "",
            "successful": int(stat.get("SuccessfulCall(C)", 0) or 0),
            "failed": int(stat.get("FailedCall(C)", 0) or 0),
            "setup_ms": summarize(setup_times_from_trace(peer.folder), "ms"),
            "setup_ms_sipp_rtd": summarize(read_rtt(peer.folder), "ms"),
        }
    starts = sorted(e.at.timestamp() for e, c in events if e.event == "started" and c.kind == "sip")
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    out["calls_set_up_per_s"] = (len(starts) - 1) / span if span > 0 else 0.0
    out["concurrent_calls_peak"] = _peak(events)
    out["calls_not_ended_by_bye"] = sum(
        1 for e, _ in events if e.event == "ended" and e.reason != "bye"
    )
    out["late_playout_ticks"] = bridge.media.late_ticks - late0
    out["_events"] = (first_event, len(publisher.events))
    return out


def _media(step: dict[str, Any], sink: LossSink, publisher: MemoryPublisher, expected: int) -> None:
    """Frames lost: expected minus played, over the legs that were sent RTP (the first
    stream of every call), and the part of it concealed inside calls."""
    first, last = step.pop("_events")
    legs = []
    for event, call in publisher.events[first:last]:
        if event.event == "started":
            first_leg = min(call.legs.values(), key=lambda leg: leg.index, default=None)
            if first_leg is not None:
                legs.append(first_leg.leg_id)
    normal, concealed = sink.totals(legs)
    missing = sum(max(expected - normal.get(leg, 0), 0) for leg in legs)
    total = expected * len(legs)
    step["frames"] = {
        "legs": len(legs),
        "expected": total,
        "lost": missing,
        "concealed_inside_calls": concealed,
        "loss_ratio": missing / total if total else 0.0,
        "lost_per_leg": summarize(
            [max(expected - normal.get(leg, 0), 0) for leg in legs], "frames"
        ),
    }


def _degraded(step: dict[str, Any], args: argparse.Namespace) -> list[str]:
    why = []
    for name in ("sip", "siprec"):
        peer = step.get(name)
        if peer is None:
            continue
        if peer["failed"] or peer["sipp_exit"] != 0 or peer["successful"] < peer["calls"]:
            why.append(f"{name}: failed calls")
        if peer["setup_ms"].get("p99", 0.0) > float(args.max_setup_p99_ms):
            why.append(f"{name}: setup p99 over {args.max_setup_p99_ms:g} ms")
    if step["calls_set_up_per_s"] < 0.95 * step["rate"] and step["sip"]["calls"] > 2:
        why.append("setup rate under 95 % of the target")
    if step["frames"]["loss_ratio"] > float(args.max_loss):
        why.append("frames lost")
    return why


def _brief(step: dict[str, Any]) -> dict[str, Any]:
    return {
        "rate": step["rate"],
        "calls_set_up_per_s": step["calls_set_up_per_s"],
        "concurrent_calls_peak": step["concurrent_calls_peak"],
        "setup_ms_p50": step["sip"]["setup_ms"].get("p50"),
        "setup_ms_p99": step["sip"]["setup_ms"].get("p99"),
        "siprec_setup_ms_p99": step.get("siprec", {}).get("setup_ms", {}).get("p99"),
        "frames_lost": step["frames"]["lost"],
        "loss_ratio": step["frames"]["loss_ratio"],
        "degraded": step["degraded"],
    }


def _peak(events: list[Any]) -> int:
    deltas = sorted(
        (e.at.timestamp(), 1 if e.event == "started" else -1)
        for e, _ in events
        if e.event in ("started", "ended")
    )
    live = peak = 0
    for _, d in deltas:
        live += d
        peak = max(peak, live)
    return peak


def _free_port(even: bool = False) -> int:
    """A free UDP port on 127.0.0.1 (even, and with a free odd one above, for SIPp's
    media port: RTP and RTCP)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not even or (port % 2 == 0 and port < 65000):
            return port


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-500:] if path.exists() else ""
