"""install-vad and the speech_activity detector: Silero VAD copied from the silero-vad
wheel, run streaming per leg on 20 ms frames (batched across legs), on real speech vs
silence, a tone and noise. Skipped only where silero-vad is not installed."""

from __future__ import annotations

import importlib.util
import itertools
import time

import numpy as np
import numpy.typing as npt
import pytest

from detectors.manifest import sha256_file

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("silero_vad") is None, reason="silero-vad (convert extra) missing"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from detectors.vad.install import install_vad

    inst, _ = install_vad(tmp_path_factory.mktemp("models"))
    return inst


def test_install_copies_onnx_with_manifest_and_licence(installed) -> None:  # type: ignore[no-untyped-def]
    m = installed.manifest
    assert sha256_file(installed.model_path) == m.sha256
    assert m.dimension.value == "speech_activity" and m.licence.startswith("MIT")
    assert "silero-vad" in m.provenance and "state" in m.description
    lic = installed.model_path.parent / f"{m.key}.LICENSE"
    assert "MIT License" in lic.read_text()


def _streams(speech: npt.NDArray[np.int16]) -> dict[str, npt.NDArray[np.int16]]:
    n = min(speech.size, 20 * 8000)
    t = np.arange(n) / 8000
    return {
        "speech": speech[:n],
        "silence": np.zeros(n, np.int16),
        "tone": (3000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16),
        "noise": (np.random.default_rng(0).standard_normal(n) * 800).astype(np.int16),
    }


def test_streaming_per_leg_on_real_speech_vs_silence_and_tone(
    installed,  # type: ignore[no-untyped-def]
    speech_8k: npt.NDArray[np.int16],
) -> None:
    from detectors.vad.silero import SileroVad, SpeechActivity

    vad = SileroVad(installed.model_path)
    sa = SpeechActivity(vad)
    legs = _streams(speech_8k)
    for leg in legs:
        sa.add_leg(leg)
    n = next(iter(legs.values())).size
    windows = []
    t0 = time.perf_counter()
    for i in range(0, n - 159, 160):  # 20 ms frames
        windows += sa.push({leg: x[i : i + 160] for leg, x in legs.items()})
    elapsed = time.perf_counter() - t0
    dur = n / 8000
    mean = {leg: np.mean([w.probability for w in windows if w.leg_id == leg]) for leg in legs}
    assert mean["speech"] > 0.7
    for other in ("silence", "tone", "noise"):
        assert mean[other] < 0.1, mean
        assert sa.net_speech_s(other) < 0.5
    assert 0.4 * dur < sa.net_speech_s("speech") <= dur
    # windows: 32 chunks of 32 ms, contiguous, net speech non-decreasing
    sp = [w for w in windows if w.leg_id == "speech"]
    assert all(abs(w.end_s - w.start_s - 1.024) < 1e-9 for w in sp)
    assert all(b.net_speech_s >= a.net_speech_s for a, b in itertools.pairwise(sp))
    # one batched ONNX call per 32 ms serves every leg; cheap per 20 ms tick
    assert sa.chunks == sa.steps * len(legs)
    assert elapsed / (n // 160) < 0.005


def test_batched_legs_match_a_single_leg_stream(
    installed,  # type: ignore[no-untyped-def]
    speech_8k: npt.NDArray[np.int16],
) -> None:
    """Legs that join at different times (different chunk phases) share batches, and each
    leg's probabilities equal those of the leg run on its own."""
    from detectors.vad.silero import SileroVad, SpeechActivity

    vad = SileroVad(installed.model_path)
    x = speech_8k[: 5 * 8000]
    alone = vad.run_stream(x[None].astype(np.float32) / 32768.0)[0]
    sa = SpeechActivity(vad, chunks_per_window=1)
    sa.add_leg("a")
    got = []
    for k, i in enumerate(range(0, x.size - 159, 160)):
        if k == 3:
            sa.add_leg("b")
        frames = {"a": x[i : i + 160]}
        if k >= 3:
            frames["b"] = x[i : i + 160][::-1]
        got += [w.probability for w in sa.push(frames) if w.leg_id == "a"]
    np.testing.assert_allclose(np.array(got), alone[: len(got)], atol=1e-5)


def test_window_detector_and_cost(installed, speech_8k: npt.NDArray[np.int16]) -> None:  # type: ignore[no-untyped-def]
    from detectors.vad.silero import SileroWindowDetector, cpu_ms_per_window

    det = SileroWindowDetector(installed.model_path, installed.manifest.version)
    w = det.spec.window
    batch = np.stack([speech_8k[:w], np.zeros(w, np.int16)]).astype(np.float32) / 32768.0
    scores = det.run_batch(batch).scores
    assert scores[0] > 0.6 and scores[1] < 0.1
    assert cpu_ms_per_window(installed.model_path) < 50.0
