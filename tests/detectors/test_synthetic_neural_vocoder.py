"""The ``neuralvoc`` spoof family (issue 6): copy-synthesis through a GAN vocoder the
build trains itself. It hears only the speakers pinned to train, resynthesises only
training speakers' files, leaves dev and test unchanged, joins only when asked, and a
retrained vocoder means new spoofs and a new stage cache key. The network part trains a
tiny vocoder on real Asterisk prompts (torch, the convert extra, as in CI)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest
import soundfile

from detectors.synthetic import corpus, dataset, generators, neural_vocoder, train
from detectors.synthetic.corpus import Utterance, part_of
from detectors.synthetic.dataset import Budget

SEED = 1


def _utt(speaker: str, k: int, label: str = "bonafide") -> Utterance:
    return Utterance(
        path=Path(f"/corpus/{speaker}/{k}.wav"),
        dataset="x",
        label=label,
        speaker=speaker,
        rate=16_000,
        duration_s=3.0,
        licence="CC0",
        text=None,
        language="en",
    )


def _corpus() -> list[Utterance]:
    hashed = [f"so762_{i:04d}" for i in range(40)]
    pinned = sorted(corpus.PINNED)
    return [_utt(s, k) for s in hashed + pinned for k in range(3)] + [
        _utt("gemini_tts_es_mx_v1", 0, "spoof")
    ]


def _neuralvoc() -> generators.System:
    (system,) = [s for s in generators.SYSTEMS if s.family == "neuralvoc"]
    return system


def test_the_vocoder_hears_only_speakers_pinned_to_train_at_every_seed() -> None:
    utts = _corpus()
    files = neural_vocoder.training_files(utts)
    owners = {u.path: u.speaker for u in utts}
    assert files and {owners[f] for f in files} == {
        s for s, part in corpus.PINNED.items() if part == "train"
    }
    for seed in range(5):  # pinned: the same side whatever the split's seed
        assert all(part_of(owners[f], seed) == "train" for f in files)


def test_neuralvoc_is_opt_in_and_train_only() -> None:
    assert _neuralvoc().parts == ("train",)
    assert "neuralvoc" not in {s.family for s in generators.selected()}
    assert "neuralvoc" not in {s.family for s in generators.selected(("kokoro",))}
    chosen = generators.selected(("kokoro", "neuralvoc"))
    assert {s.id for s in chosen} == {s.id for s in generators.selected(("kokoro",))} | {
        _neuralvoc().id
    }


def test_plan_resynthesises_training_speakers_and_keeps_dev_and_test(tmp_path: Path) -> None:
    utts = _corpus()
    model = tmp_path / "vocoder-abc123.pt"
    base = [s for s in generators.selected() if s.family in ("world", "griffinlim")]
    with_nv = [*base, _neuralvoc()]
    before = dataset.plan(utts, Path("/w"), SEED, Budget(), base)
    after = dataset.plan(utts, Path("/w"), SEED, Budget(), with_nv, model)
    assert after[: len(before)] == before  # every other job unchanged
    nv = after[len(before) :]
    owners = {u.path: u.speaker for u in utts}
    assert nv and {j.part for j in nv} == {"train"}
    assert all(j.source is not None and part_of(owners[j.source], SEED) == "train" for j in nv)
    assert all(j.model == model and j.out.name.endswith(".vocoder-abc123.wav") for j in nv)
    assert {j.system_id for j in nv} == {"neuralvoc_nsf-mel64@vocoder-abc123"}
    with pytest.raises(ValueError, match="trained vocoder"):
        dataset.plan(utts, Path("/w"), SEED, Budget(), with_nv)


def test_stage_keys_of_builds_without_it_are_unchanged() -> None:
    systems = ["espeak_en-us", "griffinlim_gl32", "kokoro_jf-alpha-en-us"]
    cfg = train.TrainConfig()
    fields: tuple[object, ...] = (cfg.windows, cfg.epochs, cfg.batch, cfg.lr, cfg.weight_decay)
    weights = {"world": 2.0, "griffinlim": 2.0, "piper": 2.0, "kokoro": 2.0}  # before it
    fields += (tuple(sorted(set(systems))), tuple(sorted(weights.items())))
    before = hashlib.sha256(repr(fields).encode()).hexdigest()[:10]
    assert train.stage_key(cfg, 1, systems) == before  # cached default builds stay valid
    with_nv = [*systems, "neuralvoc_nsf-mel64@vocoder-abc"]
    assert train.stage_key(cfg, 1, with_nv) != before
    assert train.family_weight("neuralvoc") == train.family_weight("griffinlim") == 2.0
    assert train.family_weight("espeak") == 1.0


def test_another_vocoder_is_another_training_set_for_the_stage_cache() -> None:
    cfg = train.TrainConfig()
    job = dataset.Job(_neuralvoc(), "train", "neuralvoc_x", Path("/w/a.wav"), 0, model=Path("a.pt"))
    other = dataclasses.replace(job, model=Path("b.pt"))
    assert train.stage_key(cfg, 1, [job.system_id]) != train.stage_key(cfg, 1, [other.system_id])
    longer = dataclasses.replace(neural_vocoder.QUICK, steps=5)
    files = [Path("a.wav")]
    assert neural_vocoder.cache_key(neural_vocoder.QUICK, files) != (
        neural_vocoder.cache_key(longer, files)
    )
    assert neural_vocoder.cache_key(longer, files) != neural_vocoder.cache_key(longer, [])


@pytest.fixture(scope="module")
def prompts(shared_dir: Path) -> list[Path]:
    folder = shared_dir / "data/speech/asterisk_prompts/en"
    return sorted(folder.glob("*.wav"))[:6]


def test_training_lowers_the_mel_loss_on_real_speech(prompts: list[Path]) -> None:
    pytest.importorskip("torch", reason="the convert extra (torch) is not installed")
    audio = [neural_vocoder.load_8k(p) for p in prompts]
    cfg = dataclasses.replace(neural_vocoder.QUICK, steps=150, warmup=120, batch=4, lr=2e-3)
    _, losses = neural_vocoder.train(audio, cfg)
    assert len(losses) == 150 and all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.75 * np.mean(losses[:5]), losses[::10]


def test_ensure_trains_once_and_copy_synthesis_keeps_length_and_level(
    tmp_path: Path, prompts: list[Path]
) -> None:
    pytest.importorskip("torch", reason="the convert extra (torch) is not installed")
    utts = [
        dataclasses.replace(_utt("asterisk_allison_smith", i), path=p)
        for i, p in enumerate(prompts[:3])
    ]
    said: list[str] = []
    path = neural_vocoder.ensure(tmp_path, utts, neural_vocoder.QUICK, said.append)
    assert path.is_file() and any("training the neural vocoder" in m for m in said)
    said.clear()
    assert neural_vocoder.ensure(tmp_path, utts, neural_vocoder.QUICK, said.append) == path
    assert said == []  # cached: not trained again
    out = tmp_path / "spoof.wav"
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    generators.vocode(_neuralvoc(), prompts[0], out, seed=0, model=path)
    assert torch.get_num_threads() == threads  # the caller's setting is left alone
    y, rate = soundfile.read(str(out), dtype="float32")
    x = neural_vocoder.load_8k(prompts[0])
    assert rate == neural_vocoder.RATE and len(y) == len(x)
    assert np.all(np.isfinite(y)) and not np.allclose(y, x, atol=1e-3)
    assert abs(float(np.max(np.abs(y))) - min(float(np.max(np.abs(x))), 0.95)) < 2e-3
    again, other = tmp_path / "again.wav", tmp_path / "other.wav"
    generators.vocode(_neuralvoc(), prompts[0], other, seed=1, model=path)
    generators.vocode(_neuralvoc(), prompts[0], again, seed=0, model=path)
    first = soundfile.read(str(out))[0]
    assert np.array_equal(soundfile.read(str(again))[0], first)  # a function of its seed
    assert not np.array_equal(soundfile.read(str(other))[0], first)  # which draws the noise
    with pytest.raises(generators.GeneratorError, match="trained vocoder"):
        generators.vocode(_neuralvoc(), prompts[0], tmp_path / "no.wav", seed=0)


def test_f0_frames_follow_the_mel_frames_and_find_the_voice(prompts: list[Path]) -> None:
    x = neural_vocoder.load_8k(prompts[0])
    f0 = neural_vocoder.f0_frames(x)
    assert f0.shape == (len(x) // neural_vocoder.HOP + 1,)
    voiced = f0[f0 > 0]
    assert 0.2 < len(voiced) / len(f0) < 0.95  # a spoken prompt: voiced and unvoiced frames
    assert 120 < float(np.median(voiced)) < 300  # Allison Smith's voice


def test_the_excitation_carries_the_f0_where_voiced_and_noise_where_not() -> None:
    torch = pytest.importorskip("torch", reason="the convert extra (torch) is not installed")
    _, gen_cls, _ = neural_vocoder._nets()
    gen = gen_cls(16, 4).eval()
    frames = 100  # one second
    f0 = torch.zeros(1, frames)
    f0[0, :50] = 200.0
    with torch.no_grad():
        src = gen.source(f0)[0, 0].numpy()
    assert src.shape == (frames * neural_vocoder.HOP,)
    half = len(src) // 2
    hz = np.fft.rfftfreq(half, 1 / neural_vocoder.RATE)
    band = hz > 50  # above the learnt mix's offset
    spectrum = np.abs(np.fft.rfft(src[:half] * np.hanning(half)))[band]
    peak = float(hz[band][np.argmax(spectrum)])
    assert abs(peak / 200.0 - round(peak / 200.0)) < 0.05  # a harmonic of the F0
    assert spectrum.max() > 10 * np.median(spectrum)
    unvoiced = np.abs(np.fft.rfft(src[half:] * np.hanning(half)))[band]
    assert unvoiced.max() < 10 * np.median(unvoiced)  # flat: no line
