"""The runtime end to end (real speech, G.711 through the native jitter buffer, fixture
models, fusion to a publisher), admission and backpressure, and the metrics exposition."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from conftest import Built
from test_fusion_policy import Publisher

from detectors.admission import Admission, AdmissionConfig, OverloadPolicy
from detectors.alert_schema import Abstention, Band, Dimension, LegRole
from detectors.fixture_models import MARKER_HZ
from detectors.metrics import DetectorMetrics, render
from detectors.onnx_detector import OnnxDetector
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig
from native.ingest import PulledFrames
from native.ingest_types import FRAME_INFO_DTYPE
from native.jitter import JitterBuffer
from native.sim import g711_stream


def _drive(rt: DetectorRuntime, legs: dict[int, npt.NDArray[np.int16]], seconds: float) -> None:
    """Each leg's speech as µ-law RTP through its own native jitter buffer, pulled every
    20 ms (virtual time), then handed to the runtime as one batch pull."""
    ids = np.array(sorted(legs), np.int32)
    jbs = {sid: JitterBuffer() for sid in ids}
    streams = {sid: g711_stream(legs[sid], ssrc=int(sid)) for sid in ids}
    pcm = np.zeros((len(ids), 160), np.int16)
    infos = np.zeros(len(ids), FRAME_INFO_DTYPE)
    k = {sid: 0 for sid in ids}
    for tick in range(int(seconds * 50)):
        now = tick * 20_000_000
        for i, sid in enumerate(ids):
            pk = streams[sid]
            while k[sid] < len(pk) and pk[k[sid]].send_ns <= now:
                jbs[sid].insert(pk[k[sid]].datagram, now)
                k[sid] += 1
            jbs[sid].pull_into(now, pcm[i])
            info = jbs[sid].last_info
            infos[i]["flag"], infos[i]["real_mask"] = info.flag, info.real_mask
        rt.on_frames(PulledFrames(ids, pcm, infos))


def test_spoofed_caller_alerts_once_genuine_caller_never(
    speech_8k: npt.NDArray[np.int16],
    tiny_aasist: Built,
    vad_model: Built,
    make_detector: Callable[[Built], OnnxDetector],
) -> None:
    pub = Publisher()
    dets = [make_detector(tiny_aasist), make_detector(vad_model)]
    rt = DetectorRuntime(
        dets,
        pub,
        config=RuntimeConfig(lanes=LaneConfig(max_batch=4, max_wait_s=0.01, deadline_s=30)),
    )
    rt.start()
    seconds = 8.0
    n = int(seconds * 8000)
    genuine = speech_8k[:n].copy()
    spoof = speech_8k[n : 2 * n].astype(np.float32)
    # the fixture's "synthetic" marker: a tone near 3.5 kHz from 3 s on (8 kHz audio)
    t = np.arange(n) / 8000
    spoof[3 * 8000 :] += 1500 * np.sin(2 * np.pi * MARKER_HZ * t[3 * 8000 :])
    try:
        for call in ("genuine", "spoof"):
            assert rt.open_call(call).analysed
        rt.add_leg("genuine", 1, "caller", LegRole.EXTERNAL)
        rt.add_leg("genuine", 2, "agent", LegRole.INTERNAL)
        rt.add_leg("spoof", 3, "caller", LegRole.EXTERNAL)
        legs = {1: genuine, 2: genuine, 3: np.clip(spoof, -32768, 32767).astype(np.int16)}
        _drive(rt, legs, seconds)
        deadline = time.monotonic() + 30
        # two external legs: tiny AASIST (0.5 s window, 0.25 s hop) 31 windows each over
        # 8 s, the VAD (1 s windows) 8 each
        expected = 2 * 31 + 2 * 8
        while len(pub.scores) < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(pub.scores) == expected
        rt.end_call("genuine")
        rt.end_call("spoof")
    finally:
        rt.close()
    assert all(s.leg_id == "caller" for s in pub.scores)  # the agent leg is never scored
    voice = [s for s in pub.scores if s.dimension is Dimension.SYNTHETIC_VOICE]
    assert voice and all(s.abstained is not Abstention.UNAVAILABLE for s in voice)
    assert {a.call_id for a in pub.alerts} == {"spoof"}
    live = [a for a in pub.alerts if a.call_state.value == "live"]
    assert len({a.alert_id for a in pub.alerts}) == 1 and live[0].revision == 1
    assert live[0].band is Band.HIGH
    assert min(r.start_s for r in live[0].reasons) >= 2.0  # evidence after the switch
    assert rt.fusion.risk("spoof").band is Band.LOW  # the call ended: no live risk


def test_admission_refuses_or_sheds_over_capacity() -> None:
    metrics = DetectorMetrics()
    refuse = Admission(
        AdmissionConfig(max_calls=2, policy=OverloadPolicy.REFUSE), {"m": 0.5}, metrics
    )
    assert refuse.admit("a").analysed and refuse.admit("b").analysed
    assert refuse.remaining() == 0
    d = refuse.admit("c")
    assert not d.admitted and not d.analysed and d.reason == "capacity"
    refuse.release("a")
    assert refuse.admit("c").analysed
    shed = Admission(AdmissionConfig(max_calls=1, policy=OverloadPolicy.SHED), {"m": 0.5})
    shed.admit("a")
    d = shed.admit("b")
    assert d.admitted and not d.analysed
    body = render(metrics.registry)[0].decode()
    assert 'callshield_calls_refused_total{policy="refuse"} 1.0' in body


def test_capacity_follows_measured_cost_and_queue_wait() -> None:
    adm = Admission(AdmissionConfig(workers=2, utilisation=0.8), {"aasist": 0.5})
    adm.observe_batch("aasist", 4, 0.4, [0.01] * 4)  # 0.1 s per window, 0.05 s/s per call
    assert adm.capacity() == 32  # 1.6 worker-s/s / 0.05
    for _ in range(20):
        adm.observe_batch("aasist", 4, 0.4, [0.5] * 4)  # queue waits over 250 ms
    assert not adm.admit("x").analysed


def test_metrics_exposition_names() -> None:
    m = DetectorMetrics()
    m.windows.labels("aasist", "scored").inc()
    m.batch_seconds.labels("aasist", "cpu").observe(0.1)
    m.add_jitter_stats(lambda: {"packets_late": 3})
    body, ctype = render(m.registry)
    text = body.decode()
    assert ctype.startswith("text/plain")
    for name in (
        "callshield_detector_windows_total",
        "callshield_detector_batch_seconds_bucket",
        "callshield_detector_queue_wait_seconds",
        "callshield_capacity_remaining_calls",
        "callshield_jb_packets_late_total 3.0",
    ):
        assert name in text


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_queue_wait_expires_when_no_windows_flow() -> None:
    """A busy round's waits close the door; with no window queued they expire after the
    horizon (an idle node admits a single call again), a stalled queue closes it alone."""
    clock, queued = _Clock(), [0.0]
    adm = Admission(
        AdmissionConfig(min_samples=10, wait_horizon_s=5.0, policy=OverloadPolicy.REFUSE),
        {"m": 0.5},
        clock=clock,
        queue_age=lambda: queued[0],
    )
    adm.observe_batch("m", 20, 0.2, [0.6] * 20)  # the busy round
    assert adm.admit("a").reason == "queue wait over limit"
    clock.t += 4.9
    assert not adm.admit("b").analysed  # still within the horizon
    clock.t += 0.2
    assert adm.queue_wait() == 0.0  # nothing queued, nothing recent: the wait is 0
    assert adm.admit("c").analysed
    queued[0] = 0.4  # the oldest window queued has waited 400 ms: stalled, no batch done
    assert adm.admit("d").reason == "queue wait over limit"
    queued[0] = 0.0
    assert adm.admit("d").analysed


def test_cost_counts_utterance_end_windows(
    tiny_aasist: Built, vad_model: Built, make_detector: Callable[[Built], OnnxDetector]
) -> None:
    """Admission's demand per call: the hop grid, plus the measured share of utterance-end
    windows for the dimensions cut there (the VAD is not)."""
    aasist, vad = make_detector(tiny_aasist), make_detector(vad_model)
    wide = LaneConfig(max_inflight=2)  # either model may use the whole pool of 2
    config = RuntimeConfig(utterance_end_share=0.14, lanes=wide)
    rt = DetectorRuntime([aasist, vad], Publisher(), config=config)
    sv, va = aasist.spec, vad.spec
    rt.admission.observe_batch(sv.name, 1, 0.01, [0.0])
    rt.admission.observe_batch(va.name, 1, 0.01, [0.0])
    per_call = 0.01 * 1.14 / sv.hop_s + 0.01 / va.hop_s
    assert rt.admission.capacity() == int(2 * 0.8 / per_call)
    grid_only = DetectorRuntime(
        [aasist, vad], Publisher(), config=RuntimeConfig(utterances=None, lanes=wide)
    )
    grid_only.admission.observe_batch(sv.name, 1, 0.01, [0.0])
    grid_only.admission.observe_batch(va.name, 1, 0.01, [0.0])
    assert grid_only.admission.capacity() == int(2 * 0.8 / (0.01 / sv.hop_s + 0.01 / va.hop_s))


def test_idle_runtime_admits_after_a_burst(
    speech_8k: npt.NDArray[np.int16],
    tiny_aasist: Built,
    vad_model: Built,
    make_detector: Callable[[Built], OnnxDetector],
) -> None:
    """Through the real runtime: a burst whose windows wait in the queue closes the door
    (queue wait over the limit); once the queue is empty and the horizon has passed with
    no window flowing, a new call is analysed again. The runtime's clock is the real one
    plus an offset: the idle period is a jump of the offset, not a sleep."""
    horizon, skip = 30.0, [0.0]
    rt = DetectorRuntime(
        [make_detector(tiny_aasist), make_detector(vad_model)],
        Publisher(),
        config=RuntimeConfig(
            workers=1,
            lanes=LaneConfig(max_batch=1, max_wait_s=0.0, deadline_s=60),
            admission=AdmissionConfig(
                policy=OverloadPolicy.REFUSE,
                queue_wait_limit_s=0.05,
                min_samples=20,
                wait_horizon_s=horizon,
            ),
        ),
        clock=lambda: time.monotonic() + skip[0],
    )
    legs = {}
    for i in range(8):
        assert rt.open_call(f"c{i}").analysed
        rt.add_leg(f"c{i}", i + 1, "caller", LegRole.EXTERNAL)
        legs[i + 1] = speech_8k[i * 16000 : i * 16000 + 3 * 8000]
    _drive(rt, legs, 3.0)  # the windows queue up before the scheduler runs...
    time.sleep(0.1)  # ...and wait at least 100 ms, twice the limit
    try:
        rt.start()
        assert rt.scheduler.wait_idle(60)
        d = rt.admission.admit("during")
        assert not d.analysed and d.reason == "queue wait over limit"
        for i in range(8):
            rt.end_call(f"c{i}")
        assert not rt.admission.admit("ended").analysed  # the burst's waits still count
        skip[0] = horizon + 1.0  # idle: no call, no window, for longer than the horizon
        assert rt.open_call("after").analysed
    finally:
        rt.close()
