"""Pure speaker-scoring logic: aggregation, S-norm, thresholds per watchlist size, the
1:N index, and the biometrics stage's rules (external leg only, net speech, modes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detectors.alert_schema import Dimension, LegRole
from detectors.bus.biometrics import BiometricsMode
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.speaker.biometrics_stage import BiometricsConfig, SpeakerBiometrics
from detectors.speaker.scoring import (
    Calibration,
    Cohort,
    aggregate,
    calibrate,
    l2_normalise,
    s_norm,
    threshold_for_size,
    to_unit,
)
from detectors.speaker.shared_state import StaticSpeakerState
from detectors.speaker.watchlist_index import WatchlistIndex

D = 32


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    return l2_normalise(rng.standard_normal((n, D)).astype(np.float32))


def test_aggregate_weights_by_speech_and_is_unit() -> None:
    e = np.eye(2, dtype=np.float32)
    agg = aggregate(e, [3.0, 1.0])
    assert np.linalg.norm(agg) == pytest.approx(1.0, abs=1e-6)
    assert agg[0] == pytest.approx(3 / math.sqrt(10), abs=1e-6)
    assert np.allclose(aggregate(e, [0.0, 0.0]), l2_normalise(np.ones(2, np.float32)))
    with pytest.raises(ValueError):
        aggregate(e, [1.0])


def test_s_norm_is_the_mean_of_both_z_scores() -> None:
    got = s_norm(np.array([0.8]), (np.array([0.5]), np.array([0.1])), (0.6, 0.2))
    assert got[0] == pytest.approx(0.5 * (3.0 + 1.0))


def test_threshold_per_size_holds_the_per_call_rate_under_its_assumption() -> None:
    cal = Calibration(0.0, 1.0)
    t10, t1000 = threshold_for_size(10, 0.01, cal), threshold_for_size(1000, 0.01, cal)
    assert t1000 > t10
    rng = np.random.default_rng(0)
    for n, t in ((10, t10), (1000, t1000)):
        calls = rng.standard_normal((20_000 if n == 10 else 2_000, n)).max(axis=1)
        rate = float(np.mean(calls >= t))
        assert rate == pytest.approx(0.01, abs=0.006), (n, rate)
    shifted = threshold_for_size(10, 0.01, Calibration(1.0, 2.0))
    assert shifted == pytest.approx(1.0 + 2.0 * t10)
    with pytest.raises(ValueError):
        threshold_for_size(10, 0.0, cal)


def test_to_unit_puts_the_threshold_at_one_half() -> None:
    assert to_unit(4.0, 4.0) == 0.5
    assert to_unit(4.0 + math.log(4) / 2.0, 4.0) == pytest.approx(0.8)
    assert to_unit(-1e9, 0.0) >= 0.0 and to_unit(1e9, 0.0) <= 1.0


def test_calibration_of_random_voices_is_near_standard() -> None:
    rng = np.random.default_rng(1)
    e = unit(rng, 60)
    cal = calibrate(e, [f"s{i // 2}" for i in range(60)], top_k=200)
    assert abs(cal.mean) < 0.2 and 0.7 < cal.sd < 1.3 and cal.trials == 60 * 59 // 2 - 30


def make_cohort(seed: int = 2) -> Cohort:
    rng = np.random.default_rng(seed)
    return Cohort(unit(rng, 80), 200, Calibration(0.0, 1.0, 100))


def test_index_finds_the_listed_voice_and_thresholds_by_size() -> None:
    rng = np.random.default_rng(3)
    cohort = make_cohort()
    entries = unit(rng, 50)
    idx = WatchlistIndex.build("t", 7, [f"e{i}" for i in range(50)], entries, cohort, 0.001)
    probe = l2_normalise(entries[17] + 0.3 * unit(rng, 1)[0])
    mu, sd = cohort.stats(probe[None, :])
    m = idx.search(probe, (float(mu[0]), float(sd[0])))
    assert m is not None and m.entry_id == "e17" and m.score > m.threshold
    assert m.threshold == pytest.approx(threshold_for_size(50, 0.001, cohort.calibration))
    assert WatchlistIndex.empty("t", D).search(probe, (0.0, 1.0)) is None


def result(call: str, emb: np.ndarray, start: float, role: LegRole, speech: float = 2.5):
    key = WindowKey(call, "leg", role, start, start + 3.0)
    return WindowResult(
        key=key,
        detector="speaker",
        model_version="1",
        dimension=Dimension.VOICE_MISMATCH,
        provider="cpu",
        score=0.0,
        threshold=0.5,
        abstained=None,
        quality=WindowQuality(net_speech_s=speech),
        embedding=emb,
    )


def stage(mode: BiometricsMode = BiometricsMode.FULL, min_speech: float = 4.0):
    rng = np.random.default_rng(4)
    cohort = make_cohort()
    state = StaticSpeakerState(cohort)
    voices = unit(rng, 20)
    state.indexes["t"] = WatchlistIndex.build(
        "t", 1, [f"wl_{i:016x}" for i in range(20)], voices, cohort, 0.001
    )
    bio = SpeakerBiometrics(state, BiometricsConfig(min_speech, mode))
    return bio, state, voices, rng


def test_stage_matches_after_enough_speech_and_names_the_entry_only() -> None:
    bio, _, voices, rng = stage()
    bio.open_call("c", "t")
    noisy = [l2_normalise(voices[3] + 0.2 * unit(rng, 1)[0]) for _ in range(3)]
    first = bio.process(result("c", noisy[0], 0.0, LegRole.EXTERNAL))
    assert [r.dimension for r in first] == [Dimension.VOICE_MISMATCH]  # 2.5 s < 4 s
    assert all(r.embedding is None for r in first)
    # the next window overlaps by half: it adds 1.25 s, reaching 3.75 s: still not enough
    assert len(bio.process(result("c", noisy[1], 1.5, LegRole.EXTERNAL))) == 1
    out = bio.process(result("c", noisy[2], 3.0, LegRole.EXTERNAL))
    kf = [r for r in out if r.dimension is Dimension.KNOWN_FRAUDSTER]
    assert len(kf) == 1 and kf[0].score is not None and kf[0].score > 0.9
    assert kf[0].reasons[0].startswith(f"watchlist entry wl_{3:016x}:")
    assert kf[0].key.start_s == 0.0 and all(r.embedding is None for r in out)


def test_stage_never_uses_an_internal_leg_embedding() -> None:
    bio, _, voices, _ = stage(min_speech=0.1)
    bio.open_call("c", "t")
    for role in (LegRole.INTERNAL, LegRole.MIXED, LegRole.UNKNOWN):
        out = bio.process(result("c", voices[0], 0.0, role))
        assert len(out) == 1 and out[0].embedding is None
    assert bio.stats.embeddings_refused_leg == 3 and bio.stats.embeddings_used == 0
    assert bio._calls["c"].total is None


def test_mode_off_discards_and_watchlist_only_skips_enrolment() -> None:
    bio, state, voices, _ = stage(BiometricsMode.OFF, 0.1)
    bio.open_call("c", "t")
    assert len(bio.process(result("c", voices[0], 0.0, LegRole.EXTERNAL))) == 1
    assert bio.stats.embeddings_discarded_off == 1
    bio, state, voices, rng = stage(BiometricsMode.WATCHLIST_ONLY, 0.1)
    state.enrol("t", "acct", voices[5], "consent-1")
    bio.open_call("c", "t")
    bio.claim("c", claimed_account="acct", enrolled=state.enrolment("t", "acct"))
    out = bio.process(result("c", unit(rng, 1)[0], 0.0, LegRole.EXTERNAL))
    assert out[0].detector == "speaker"  # no enrolment scoring in watchlist_only


def test_voice_mismatch_against_the_claimed_enrolment() -> None:
    bio, state, voices, rng = stage(BiometricsMode.FULL, 0.1)
    state.enrol("t", "acct", voices[5], "consent-1")
    for call, voice, high in (("same", voices[5], False), ("other", voices[9], True)):
        bio.open_call(call, "t")
        assert bio.claim(call, claimed_account="acct", enrolled=state.enrolment("t", "acct"))
        probe = l2_normalise(voice + 0.1 * unit(rng, 1)[0])
        vm = bio.process(result(call, probe, 0.0, LegRole.EXTERNAL))[0]
        assert vm.detector == "enrolment" and vm.score is not None
        assert (vm.score > 0.9) is high and "claimed account's voiceprint" in vm.reasons[0]
        assert "acct" not in vm.reasons[0]  # alerts outlive an erasure: no subject named
        bio.end_call(call)
    assert not bio.claim("gone", claimed_account="acct")
