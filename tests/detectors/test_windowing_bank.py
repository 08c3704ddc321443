"""Windowing from 20 ms frames: when windows complete, that their audio is the leg's
audio resampled once, and the abstentions decided before inference."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from conftest import voice_like
from scipy.signal import resample_poly

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.contract import DetectorSpec
from detectors.windowing import FrameBank, LegInfo, frames_from_pcm
from native import lib
from native.jitter import JitterBuffer
from native.sim import g711_stream, simulate


def _spec(**over: object) -> DetectorSpec:
    fields: dict[str, object] = {
        "name": "det",
        "version": "1",
        "dimension": Dimension.SYNTHETIC_VOICE,
        "sample_rate": 16000,
        "window": 16000,
        "hop": 8000,
        "min_net_speech_s": 0.2,
    }
    fields.update(over)
    return DetectorSpec(**fields)  # type: ignore[arg-type]


def _push(bank: FrameBank, ids: list[int], pcm: npt.NDArray[np.int16], flags=None, masks=None):  # type: ignore[no-untyped-def]
    """Push pcm [legs, samples] frame by frame."""
    n_frames = pcm.shape[1] // 160
    for f in range(n_frames):
        frame = np.ascontiguousarray(pcm[:, f * 160 : (f + 1) * 160])
        infos = frames_from_pcm(frame)
        if flags is not None:
            infos["flag"] = flags[:, f]
        if masks is not None:
            infos["real_mask"] = masks[:, f]
        bank.push(np.array(ids, np.int32), frame, infos)


def test_windows_complete_on_hop_and_carry_the_resampled_audio() -> None:
    bank = FrameBank([16000], max_legs=4, ring_s=4.0)
    bank.add_leg(7, LegInfo("c1", "caller", LegRole.EXTERNAL))
    plan = bank.plan(_spec())
    pcm = voice_like(3.0)[None, :]
    seen = []
    for f in range(150):
        _push(bank, [7], pcm[:, f * 160 : (f + 1) * 160])
        seen += [(f, j) for j in plan.collect(now=float(f))]
    # 1 s window, 0.5 s hop: windows end at 1.0, 1.5, 2.0, 2.5, 3.0 s
    assert [round(j.key.end_s, 3) for _, j in seen] == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert [f for f, _ in seen] == [49, 74, 99, 124, 149]
    last = seen[-1][1]
    assert last.abstained is None and last.length == 16000
    out = np.empty(16000, np.float32)
    last.read_into(out)
    ref = resample_poly(pcm[0].astype(np.float64) / 32768, 2, 1)
    d = bank.rings[16000].resampler.delay
    np.testing.assert_allclose(out[d:], ref[32000 : 48000 - d], atol=1e-4)


def test_many_legs_joining_at_different_times_keep_their_own_timeline() -> None:
    bank = FrameBank([8000], max_legs=8, ring_s=3.0)
    plan = bank.plan(_spec(sample_rate=8000, window=8000, hop=8000, min_net_speech_s=0.0))
    pcm = voice_like(4.0)
    bank.add_leg(1, LegInfo("a", "x", LegRole.EXTERNAL))
    for f in range(200):
        if f == 20:
            bank.add_leg(2, LegInfo("b", "x", LegRole.EXTERNAL))
        ids = [1, 2] if f >= 20 else [1]
        frame = np.stack([pcm[f * 160 : (f + 1) * 160]] * len(ids))
        bank.push(np.array(ids, np.int32), frame, frames_from_pcm(frame))
        for job in plan.collect(0.0):
            out = np.empty(8000, np.float32)
            job.read_into(out)
            start = int(job.key.start_s * 8000) + (20 * 160 if job.key.call_id == "b" else 0)
            np.testing.assert_allclose(out, pcm[start : start + 8000] / 32768, atol=1e-6)


def test_abstentions_roles_pause_concealment_and_silence() -> None:
    bank = FrameBank([8000], max_legs=8, ring_s=3.0)
    spec = _spec(sample_rate=8000, window=8000, hop=8000)
    plan = bank.plan(spec)
    legs = {
        1: LegRole.EXTERNAL,  # speech
        2: LegRole.UNKNOWN,  # -> leg_unknown
        3: LegRole.INTERNAL,  # -> skipped entirely
        4: LegRole.EXTERNAL,  # paused for 3 frames -> paused
        5: LegRole.EXTERNAL,  # 40 % concealed -> too_much_concealed
        6: LegRole.EXTERNAL,  # silence -> too_little_speech
    }
    for sid, role in legs.items():
        bank.add_leg(sid, LegInfo(f"c{sid}", "leg", role))
    pcm = np.stack([voice_like(1.0, seed=s) for s in legs])
    pcm[5] = 0
    flags = np.full((6, 50), lib.CS_FRAME_NORMAL, np.uint8)
    masks = np.full((6, 50), 0xFF, np.uint8)
    flags[3, 10:13] = lib.CS_FRAME_PAUSED
    flags[4, ::5] = lib.CS_FRAME_CONCEALED
    masks[4, ::5] = 0
    masks[4, 1::5] = 0x0F  # half-concealed frames count by unit: 30 % + 10 %
    _push(bank, list(legs), pcm, flags, masks)
    jobs = {j.key.call_id: j for j in plan.collect(0.0)}
    assert set(jobs) == {"c1", "c2", "c4", "c5", "c6"}
    assert jobs["c1"].abstained is None
    assert jobs["c2"].abstained is Abstention.LEG_UNKNOWN
    assert jobs["c4"].abstained is Abstention.PAUSED
    assert jobs["c5"].abstained is Abstention.TOO_MUCH_CONCEALED
    assert jobs["c5"].quality.concealed_ratio == pytest.approx(0.3)
    assert jobs["c6"].abstained is Abstention.TOO_LITTLE_SPEECH
    assert jobs["c1"].quality.net_speech_s > 0.9


def test_paused_audio_never_reaches_the_ring() -> None:
    bank = FrameBank([8000], max_legs=2, ring_s=2.0)
    bank.add_leg(1, LegInfo("c", "l", LegRole.EXTERNAL))
    pcm = voice_like(0.2)[None, :]
    flags = np.full((1, 10), lib.CS_FRAME_PAUSED, np.uint8)
    _push(bank, [1], pcm, flags)
    assert not bank.rings[8000].audio.any()


def test_real_jitter_buffer_loss_shows_as_concealed() -> None:
    """G.711 through the native jitter buffer with every 4th packet lost."""
    pcm = voice_like(2.5, seed=3)
    packets = g711_stream(pcm)
    jb = JitterBuffer()
    arrivals = [(p.send_ns, p.index, p.datagram) for p in packets if p.index % 4 != 3]
    res = simulate(jb, arrivals, until_ns=2_600_000_000)
    bank = FrameBank([8000], max_legs=2, ring_s=4.0)
    bank.add_leg(9, LegInfo("c", "l", LegRole.EXTERNAL))
    plan = bank.plan(_spec(sample_rate=8000, window=8000, hop=8000, max_concealed_ratio=0.5))
    jobs = []
    for fr in res.frames:
        infos = frames_from_pcm(fr.pcm[None, :], int(fr.flag))
        infos["real_mask"] = fr.real_mask
        bank.push(np.array([9], np.int32), fr.pcm[None, :], infos)
        jobs += plan.collect(0.0)
    later = [j for j in jobs if j.key.start_s >= 0.5]
    assert later and all(0.2 <= j.quality.concealed_ratio <= 0.3 for j in later)


def test_stale_windows_are_detected_and_bad_plans_refused() -> None:
    bank = FrameBank([8000], max_legs=2, ring_s=1.5)
    bank.add_leg(1, LegInfo("c", "l", LegRole.EXTERNAL))
    plan = bank.plan(_spec(sample_rate=8000, window=8000, hop=8000, min_net_speech_s=0))
    pcm = voice_like(1.0)[None, :]
    _push(bank, [1], pcm)
    (job,) = plan.collect(0.0)
    assert bank.fresh(job)
    _push(bank, [1], pcm[:, :4000])
    assert not bank.fresh(job)
    with pytest.raises(ValueError, match="longer than the ring"):
        bank.plan(_spec(sample_rate=8000, window=16000, hop=8000))
    with pytest.raises(ValueError, match="no ring"):
        bank.plan(_spec(sample_rate=16000))
