"""train-synthetic: the speaker split is a pure partition, the channel and windowing
helpers behave, every spoof generator runs here, and a ``--quick`` derivation from the
shared corpus gives a manifest, an ONNX model that agrees with torch and that the
runtime loads and scores, and a test split that ``callshield eval --by-family`` reads.
The full model is never trained here (it takes minutes: ``callshield models
train-synthetic``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.eval.dataset import family_of
from detectors.eval.metrics import eer
from detectors.synthetic import channel, corpus, generators, neural_vocoder, train
from detectors.synthetic.corpus import PINNED, part_of, split_speakers

speaker_ids = st.lists(st.text("abcxyz019_", min_size=1, max_size=8), max_size=60, unique=True)


@settings(max_examples=60, deadline=None)
@given(speakers=speaker_ids, seed=st.integers(0, 1000))
def test_split_is_a_pure_partition(speakers: list[str], seed: int) -> None:
    parts = split_speakers(speakers, seed)
    assert set().union(*parts.values()) == set(speakers)
    assert not (parts["train"] & parts["dev"]) and not (parts["train"] & parts["test"])
    assert not (parts["dev"] & parts["test"])
    # pure: a speaker's part depends on (speaker, seed) only, not on the others
    again = split_speakers(list(reversed(speakers))[: len(speakers) // 2], seed)
    for p, members in again.items():
        assert members <= parts[p]


def test_split_pins_and_unseen_generator() -> None:
    for spk, part in PINNED.items():
        assert part_of(spk, 0) == part == part_of(spk, 7)
    assert all(part_of(f"gemini_{v}", s) == "test" for v in ("Kore", "Puck") for s in (0, 3))
    parts = [part_of(f"so762_{i:04d}", 0) for i in range(4000)]
    shares = {p: parts.count(p) / len(parts) for p in corpus.PARTS}
    assert shares["train"] == pytest.approx(0.6, abs=0.03)
    assert shares["dev"] == pytest.approx(0.15, abs=0.03)


def test_threshold_at_fa_and_runtime_windows() -> None:
    bona = [i / 100 for i in range(100)]  # 0.00 .. 0.99
    t = train.threshold_at_fa(bona, 0.02)
    assert np.mean(np.asarray(bona) >= t) <= 0.02 and np.mean(np.asarray(bona) >= 0.97) > 0.02
    rng = np.random.default_rng(0)
    loud = (0.1 * rng.standard_normal(train.WINDOW * 2)).astype(np.float32)
    assert train.runtime_windows(loud).shape == (3, train.WINDOW)  # ends at 3, 4.5, 6 s
    silent = np.zeros(train.WINDOW * 2, np.float32)
    assert train.runtime_windows(silent).shape == (0, train.WINDOW)  # too little speech


def test_channel_keeps_length_and_speech() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(train.WINDOW) / channel.RATE
    x = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    for _ in range(20):
        y = channel.augment(x, rng)
        assert y.shape == x.shape and np.isfinite(y).all() and np.abs(y).max() <= 1.0
        assert np.abs(np.corrcoef(x, y)[0, 1]) > 0.5
    wide = [channel.augment(x, rng, wide=True) for _ in range(40)]
    for y in wide:  # reverberation and GSM / Opus upstream legs keep the window usable
        assert y.shape == x.shape and np.isfinite(y).all() and np.abs(y).max() <= 1.0
        assert np.abs(np.corrcoef(x[400:-400], y[400:-400])[0, 1]) > 0.3

    # an upstream GSM / Opus leg is lossy well beyond G.711's rounding, yet keeps the tone
    def err(y: np.ndarray) -> float:
        return float(np.mean((y[800:-800] - x[800:-800]) ** 2) / np.mean(x**2))

    ulaw = err(channel.condition(x, "pcmu"))
    for i in range(4):
        up = channel._upstream(x, np.random.default_rng(i))
        assert up.shape == x.shape and np.corrcoef(x[800:-800], up[800:-800])[0, 1] > 0.5
        assert err(up) > 3 * ulaw
    for name in ("clean", "pcmu", "pcma"):
        y = channel.condition(x, name)
        assert np.corrcoef(x[200:-200], y[200:-200])[0, 1] > 0.999
    lossy = channel.condition(x, "pcmu_loss5", seed=3)
    assert lossy.shape == x.shape and not np.allclose(lossy, channel.condition(x, "pcmu"))
    with pytest.raises(ValueError, match="unknown channel condition"):
        channel.condition(x, "gsm")


def test_every_generator_runs_here(tmp_path: Path, shared_dir: Path) -> None:
    """.ci/install.sh and the convert extra provide every family; each makes audio."""
    source = shared_dir / "data/speech/cmu_arctic"
    wav = sorted(source.glob("*.wav"))[0]
    seen = set()
    for system in generators.SYSTEMS:
        assert generators.available(system) is None, system.id
        if system.family in seen:
            continue
        seen.add(system.family)
        out = tmp_path / f"{system.id}.wav"
        if system.family == "neuralvoc":  # a vocoder the build trains: a tiny one here
            pinned = corpus.load_corpus(shared_dir / "data/speech")
            lj = [u for u in pinned if u.speaker == "ljspeech_lj"][:2]
            model = neural_vocoder.ensure(tmp_path, lj, neural_vocoder.QUICK)
            generators.vocode(system, wav, out, seed=1, model=model)
        elif system.vocoder:
            generators.vocode(system, wav, out, seed=1)
        else:
            generators.tts(system, "Please enter your account number now.", out, seed=1)
        import soundfile

        audio, rate = soundfile.read(str(out), dtype="float32")
        assert rate >= 8000 and len(audio) / rate > 1.0 and np.abs(audio).max() > 0.05


@pytest.fixture(scope="module")
def quick(
    tmp_path_factory: pytest.TempPathFactory, shared_dir: Path, synthetic_quick_work: Path
) -> Any:
    from detectors.synthetic.build import build

    root = tmp_path_factory.mktemp("train-synthetic")
    work = synthetic_quick_work  # the spoofs of every quick build, generated once
    return build(root / "models", work, shared_dir / "data/speech", 0, quick=True)


def test_quick_build_manifest_and_split(quick: Any) -> None:
    from detectors.synthetic.build import NAME

    m = quick.installed.manifest
    r = quick.report
    assert m.name == NAME and m.dimension.value == "synthetic_voice"
    assert (m.input.sample_rate, m.input.window, m.input.hop) == (8000, 24_000, 12_000)
    assert m.output.score_transform == "identity" and "QUICK BUILD" in m.description
    assert set(m.thresholds) == {"default", "pcmu", "pcma"}
    assert m.thresholds["default"] == max(m.thresholds.values())
    assert "CC BY-SA 3.0" in m.licence and "Apache-2.0: speechocean762" in m.provenance
    speakers = {p: set(v) for p, v in r["speakers"].items()}
    assert set(m.training_speakers) == speakers["train"] and speakers["train"]
    assert not (speakers["train"] & speakers["dev"]) and not (speakers["train"] & speakers["test"])
    assert not (speakers["dev"] & speakers["test"])
    assert r["onnx_max_abs_diff"] <= 1e-5
    assert "gemini" in r["clips"]["test"] and "gemini" not in r["clips"]["train"]


def test_quick_build_spoofs_follow_their_source_speaker(quick: Any) -> None:
    test_dir = Path(quick.report["testset"])
    for spk_dir in (test_dir / "spoof").iterdir():
        fam, _, source = spk_dir.name.partition("_")
        if fam in generators.VOCODER_FAMILIES:
            assert part_of(source, 0) == "test", spk_dir.name
    for spk_dir in (test_dir / "bonafide").iterdir():
        assert part_of(spk_dir.name, 0) == "test"


def test_quick_build_lays_out_the_dev_split_for_eval(quick: Any) -> None:
    """The dev split is laid out like the test split, so ``callshield eval`` can score it
    through the live pipeline (thresholds or fusion weights chosen on dev, as on test)."""
    dev_dir = Path(quick.report["devset"])
    assert (
        dev_dir.name == "devset-s0-quick" and dev_dir.parent == Path(quick.report["testset"]).parent
    )
    bona = {p.name for p in (dev_dir / "bonafide").iterdir()}
    assert bona == set(quick.report["speakers"]["dev"])
    spoof = list((dev_dir / "spoof").iterdir())
    assert spoof and all(f.resolve().is_file() for d in spoof for f in d.iterdir())
    for spk_dir in spoof:
        fam, _, source = spk_dir.name.partition("_")
        if fam in generators.VOCODER_FAMILIES:
            assert part_of(source, 0) == "dev", spk_dir.name


def test_quick_model_onnx_matches_torch_and_runtime_scores(quick: Any, shared_dir: Path) -> None:
    import torch

    from detectors.eval.audio import read_audio
    from detectors.model_store import ModelStore
    from detectors.onnx_detector import OnnxDetector

    store = ModelStore(quick.installed.model_path.parent)
    inst = store.get(quick.installed.manifest.name)
    det = OnnxDetector(inst.manifest, inst.model_path)
    x, rate = read_audio(sorted((shared_dir / "data/speech/osr").glob("*.wav"))[0])
    windows = train.runtime_windows(channel.condition(channel.to_8k(x, rate), "pcmu"))
    assert len(windows) >= 4
    scores = det.run_batch(windows).scores
    assert scores.shape == (len(windows),)
    assert np.all((scores >= 0) & (scores <= 1))
    with torch.no_grad():
        ref = quick.model(torch.from_numpy(windows)).numpy().reshape(-1)
    np.testing.assert_allclose(scores, ref, atol=1e-5)


def test_eval_by_family_on_the_quick_test_split(quick: Any, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "eval", quick.report["testset"],
         "--models-dir", str(quick.installed.model_path.parent),
         "--detector", quick.installed.manifest.name,
         "--conditions", "g711", "--by-family", "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    report = json.loads(out)
    g711 = report["detectors"][0]["conditions"]["g711"]
    fams = g711["by_family"]
    assert "gemini" in fams and fams["gemini"]["scored_calls"] >= 1
    for f in fams.values():
        assert f["eer"] is None or 0.0 <= f["eer"] <= 1.0
    assert report["detectors"][0]["excluded_training_speakers"] == 0  # test split only


def test_training_stage_cache_keys() -> None:
    """A cached stage is reused only for the settings it was trained with: stage 1 ignores
    the stage-2 settings, stage 2 depends on both stages and on the channel."""
    base = train.TrainConfig()
    wide = train.TrainConfig(stage2_windows=8_000)
    narrow = train.TrainConfig(stage2_windows=8_000, stage2_wide=False)
    assert train.stage_key(base, 1) == train.stage_key(wide, 1) == train.stage_key(narrow, 1)
    assert train.stage_key(train.TrainConfig(epochs=3), 1) != train.stage_key(base, 1)
    keys = {train.stage_key(c, 2) for c in (base, wide, narrow, train.TrainConfig(epochs=3))}
    assert len(keys) == 4
    # the training spoof systems are part of the key: a new generator retrains
    with_kokoro = train.stage_key(base, 1, ["espeak_en-us", "kokoro_jf-alpha-en-us"])
    assert train.stage_key(base, 1, ["espeak_en-us", "espeak_en-us"]) != with_kokoro
    assert with_kokoro == train.stage_key(base, 1, ["kokoro_jf-alpha-en-us", "espeak_en-us"])


def test_family_of_and_eer_helpers() -> None:
    assert family_of("gemini_Kore") == "gemini" and family_of("world_so762_0001") == "world"
    result = eer([0.1, 0.2], [0.8, 0.9])
    assert result is not None and result.eer == 0.0
