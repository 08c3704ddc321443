"""A small GAN neural vocoder of our own (training time only, torch): the ``neuralvoc``
spoof family, copy-synthesis of bona fide speech through a network.

Why: the spoofs a build trains on hold one neural waveform generator per TTS family
(piper's VITS decoder, Kokoro's iSTFTNet) and no neural *resynthesis* of real speech,
yet every modern generator ends in a neural vocoder. Training a countermeasure on real
speech passed through neural vocoders (copy-synthesis) is a published way to teach
it their artefacts without the TTS front ends (Wang & Yamagishi, ICASSP 2023; see
shared/research/detector-notes.md). No pretrained vocoder weights are reachable offline,
so we train one here, HiFi-GAN-shaped and small, at 8 kHz.

- Trained only on the speakers ``corpus.PINNED`` keeps in train at every seed (Allison
  Smith's prompts, LJ Speech), so no dev or test speaker is ever heard by it, at any
  seed, and one vocoder serves every seed (its own seed is fixed, ``VocoderConfig.seed``).
- Input: a 64-band log-mel spectrogram (Hann 256, hop 80 = 10 ms) of 8 kHz audio and its
  F0 (WORLD); output: 8 kHz audio, upsampled 5 x 4 x 4 by transposed convolutions with
  multi-receptive-field residual blocks (HiFi-GAN's generator, narrower), with a harmonic
  excitation of the F0 fed into every stage (the neural source-filter idea, as in
  NSF-HiFi-GAN): without it, 3,000 steps learnt no harmonics at all; with it, the low
  ones. Either is far from a modern vocoder, and a detector trained on its copies was
  worse on every figure (measured: the model card, "A neural vocoder of our own").
- Loss: mel L1 alone for ``warmup`` steps, then least-squares GAN against multi-period
  (2, 3, 5) and one multi-scale discriminator, plus feature matching (HiFi-GAN's weights).
- Cached in the build's work folder under a digest of its settings and training files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import read_audio
from detectors.synthetic import channel

FloatArray = npt.NDArray[np.float32]
RATE = channel.RATE  # 8 kHz, the telephone channel's
N_FFT = 256
HOP = 80  # 10 ms; the generator upsamples by UPSAMPLE's product
N_MELS = 64
UPSAMPLE = (5, 4, 4)
VERSION = 2  # bump when the network, features or training loop change (the cache key)


@dataclass(frozen=True, slots=True)
class VocoderConfig:
    steps: int = 3000
    warmup: int = 800  # mel-only steps before the discriminators join
    batch: int = 12
    segment: int = 4000  # samples (0.5 s), a multiple of HOP
    channels: int = 128  # after the input convolution; halved at every upsampling
    harmonics: int = 8  # sines of the F0 in the excitation (those under Nyquist)
    lr: float = 4e-4
    seed: int = 0


QUICK = VocoderConfig(steps=4, warmup=2, batch=2, segment=1600, channels=16, harmonics=4)


def cache_key(cfg: VocoderConfig, files: Sequence[Path]) -> str:
    fields = {"v": VERSION, "cfg": asdict(cfg), "files": sorted(f.name for f in files)}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def load_8k(path: Path) -> FloatArray:
    return channel.to_8k(*read_audio(path))


def f0_frames(x: FloatArray) -> FloatArray:
    """F0 in Hz (0: unvoiced) of 8 kHz audio, one value per mel frame (every HOP samples
    from sample 0: ``len(x) // HOP + 1``), by WORLD's DIO and StoneMask."""
    from detectors.synthetic.generators import _pyworld  # generators imports this module

    pw = _pyworld()
    xd = np.ascontiguousarray(x, np.float64)
    f0, t = pw.dio(xd, RATE, frame_period=1000.0 * HOP / RATE)
    f0 = pw.stonemask(xd, f0, t, RATE)
    out = np.zeros(len(x) // HOP + 1, np.float32)
    n = min(len(out), len(f0))
    out[:n] = f0[:n]
    return out


# ---- the networks (torch is imported here only: the convert extra) ----------------------


@cache
def _nets() -> Any:
    """The torch modules, built on first use so that importing this module needs no torch."""
    import torch
    from torch import Tensor, nn
    from torch.nn.utils.parametrizations import weight_norm

    def lrelu(x: Any) -> Any:
        return torch.nn.functional.leaky_relu(x, 0.1)

    class MelSpec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            import librosa

            fb = librosa.filters.mel(sr=RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=40, fmax=RATE / 2)
            self.fb: Tensor
            self.win: Tensor
            self.register_buffer("fb", torch.from_numpy(fb).float())
            self.register_buffer("win", torch.hann_window(N_FFT))

        def forward(self, x: Any) -> Any:  # (B, T) -> (B, N_MELS, T // HOP + 1)
            spec = torch.stft(x, N_FFT, HOP, N_FFT, self.win, return_complex=True).abs()
            return torch.log(torch.clamp(self.fb @ spec, min=1e-5))

    class ResBlock(nn.Module):
        def __init__(self, ch: int, k: int, dilations: tuple[int, ...]) -> None:
            super().__init__()
            self.c1 = nn.ModuleList(
                weight_norm(nn.Conv1d(ch, ch, k, dilation=d, padding=d * (k - 1) // 2))
                for d in dilations
            )
            self.c2 = nn.ModuleList(
                weight_norm(nn.Conv1d(ch, ch, k, padding=(k - 1) // 2)) for _ in dilations
            )

        def forward(self, x: Any) -> Any:
            for a, b in zip(self.c1, self.c2, strict=True):
                x = x + b(lrelu(a(lrelu(x))))
            return x

    class Source(nn.Module):
        """The excitation: sines at the F0's harmonics (under Nyquist) where voiced, a
        little noise everywhere, merged by a learnt mix (the neural source-filter model)."""

        def __init__(self, harmonics: int) -> None:
            super().__init__()
            self.harmonics = harmonics
            self.mix = nn.Linear(harmonics + 1, 1)

        def forward(self, f0: Any, rng: Any = None) -> Any:  # (B, F) -> (B, 1, F * HOP)
            f = torch.repeat_interleave(f0, HOP, dim=1)
            k = torch.arange(1, self.harmonics + 1, dtype=f.dtype)
            fk = f[..., None] * k  # (B, T, H)
            phase = 2 * torch.pi * torch.cumsum(fk / RATE, dim=1)
            if self.training:  # a random start phase per harmonic
                phase = phase + 2 * torch.pi * torch.rand(f.shape[0], 1, self.harmonics)
            voiced = (f > 0).to(f.dtype)[..., None]
            sines = 0.1 * torch.sin(phase) * voiced * (fk < RATE / 2).to(f.dtype)
            draw = torch.randn(sines[..., :1].shape, generator=rng, dtype=f.dtype)
            noise = draw * (0.003 * voiced + 0.033 * (1 - voiced))
            x = torch.cat([sines + noise, noise], dim=-1)
            return torch.tanh(self.mix(x)).transpose(1, 2)

    class Generator(nn.Module):
        def __init__(self, channels: int, harmonics: int) -> None:
            super().__init__()
            self.source = Source(harmonics)
            self.pre = weight_norm(nn.Conv1d(N_MELS, channels, 7, padding=3))
            self.ups = nn.ModuleList()
            self.mrf = nn.ModuleList()
            self.taps = nn.ModuleList()  # the excitation into each stage, at its rate
            ch = channels
            left = int(np.prod(UPSAMPLE))
            for u in UPSAMPLE:
                left //= u
                self.taps.append(
                    nn.Conv1d(1, ch // 2, 2 * left, left, padding=left // 2)
                    if left > 1
                    else nn.Conv1d(1, ch // 2, 1)
                )
                self.ups.append(
                    weight_norm(
                        nn.ConvTranspose1d(
                            ch, ch // 2, 2 * u, u, padding=(u + 1) // 2, output_padding=u % 2
                        )
                    )
                )
                ch //= 2
                self.mrf.append(
                    nn.ModuleList([ResBlock(ch, 3, (1, 3, 5)), ResBlock(ch, 7, (1, 3, 5))])
                )
            self.post = weight_norm(nn.Conv1d(ch, 1, 7, padding=3))

        def forward(self, mel: Any, f0: Any, rng: Any = None) -> Any:  # -> (B, F * HOP)
            src = self.source(f0, rng)  # rng: the excitation noise's torch.Generator
            x = self.pre(mel)
            for up, blocks, tap in zip(self.ups, self.mrf, self.taps, strict=True):
                x = up(lrelu(x)) + tap(src)
                outs = [b(x) for b in blocks]  # type: ignore[attr-defined]
                x = torch.stack(outs).mean(0)
            return torch.tanh(self.post(lrelu(x))).squeeze(1)

    def judge(convs: Any, post: Any, x: Any) -> tuple[Any, list[Any]]:
        """A discriminator's score map and every layer's features (feature matching)."""
        feats = []
        for c in convs:
            x = lrelu(c(x))
            feats.append(x)
        return post(x).flatten(1), feats

    class PeriodD(nn.Module):
        def __init__(self, period: int) -> None:
            super().__init__()
            self.period = period
            chans = (1, 16, 32, 64, 64)
            self.convs = nn.ModuleList(
                weight_norm(nn.Conv2d(a, b, (5, 1), (3, 1), padding=(2, 0)))
                for a, b in itertools.pairwise(chans)
            )
            self.post = weight_norm(nn.Conv2d(64, 1, (3, 1), padding=(1, 0)))

        def forward(self, x: Any) -> tuple[Any, list[Any]]:
            b, t = x.shape
            pad = (-t) % self.period
            x = torch.nn.functional.pad(x, (0, pad), mode="reflect")
            return judge(self.convs, self.post, x.view(b, 1, -1, self.period))

    class ScaleD(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(
                [
                    weight_norm(nn.Conv1d(1, 16, 15, padding=7)),
                    weight_norm(nn.Conv1d(16, 64, 41, 4, groups=4, padding=20)),
                    weight_norm(nn.Conv1d(64, 128, 41, 4, groups=16, padding=20)),
                    weight_norm(nn.Conv1d(128, 128, 5, padding=2)),
                ]
            )
            self.post = weight_norm(nn.Conv1d(128, 1, 3, padding=1))

        def forward(self, x: Any) -> tuple[Any, list[Any]]:
            return judge(self.convs, self.post, x.unsqueeze(1))

    class Discriminators(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ds = nn.ModuleList([PeriodD(2), PeriodD(3), PeriodD(5), ScaleD()])

        def forward(self, x: Any) -> list[tuple[Any, list[Any]]]:
            return [d(x) for d in self.ds]

    return MelSpec, Generator, Discriminators


def train(
    audio: Sequence[FloatArray],
    cfg: VocoderConfig,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, list[float]]:
    """Train the generator on ``audio`` (8 kHz); returns its state dict and the mel L1
    loss of every step."""
    import torch

    say = progress or (lambda msg: None)
    mel_spec_cls, gen_cls, disc_cls = _nets()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    clips = [a for a in audio if len(a) > cfg.segment]
    if not clips:
        raise ValueError("no training audio longer than one segment")
    lengths = np.array([len(a) for a in clips], np.float64)
    f0s = [f0_frames(a) for a in clips]
    frames = cfg.segment // HOP + 1
    mel = mel_spec_cls()
    gen, disc = gen_cls(cfg.channels, cfg.harmonics), disc_cls()
    opt_g = torch.optim.AdamW(gen.parameters(), cfg.lr, betas=(0.8, 0.99))
    opt_d = torch.optim.AdamW(disc.parameters(), cfg.lr, betas=(0.8, 0.99))
    started = time.monotonic()
    losses: list[float] = []
    for step in range(cfg.steps):
        batch = np.empty((cfg.batch, cfg.segment), np.float32)
        pitch = np.zeros((cfg.batch, frames), np.float32)
        for i, k in enumerate(rng.choice(len(clips), cfg.batch, p=lengths / lengths.sum())):
            a, f0 = clips[int(k)], f0s[int(k)]
            first = int(rng.integers((len(a) - cfg.segment) // HOP))  # on the frame grid
            seg = a[first * HOP : first * HOP + cfg.segment]
            batch[i] = seg / max(float(np.max(np.abs(seg))), 1e-3) * rng.uniform(0.3, 0.95)
            got = f0[first : first + frames]
            pitch[i, : len(got)] = got
        real = torch.from_numpy(batch)
        real_mel = mel(real)
        fake = gen(real_mel, torch.from_numpy(pitch))[:, : cfg.segment]
        loss_mel = torch.nn.functional.l1_loss(mel(fake), real_mel)
        adversarial = step >= cfg.warmup
        if adversarial:
            loss_d = torch.stack(
                [
                    torch.mean((1 - r) ** 2) + torch.mean(f**2)
                    for (r, _), (f, _) in zip(disc(real), disc(fake.detach()), strict=True)
                ]
            ).sum()
            opt_d.zero_grad()
            loss_d.backward()  # type: ignore[no-untyped-call]
            opt_d.step()
            real_out, fake_out = disc(real), disc(fake)
            loss_adv = torch.stack([torch.mean((1 - f) ** 2) for f, _ in fake_out]).sum()
            loss_fm = torch.stack(
                [
                    torch.mean(torch.abs(a.detach() - b))
                    for (_, ra), (_, fa) in zip(real_out, fake_out, strict=True)
                    for a, b in zip(ra, fa, strict=True)
                ]
            ).sum()
            loss_g = 45.0 * loss_mel + loss_adv + 2.0 * loss_fm
        else:
            loss_g = 45.0 * loss_mel
        opt_g.zero_grad()
        loss_g.backward()  # type: ignore[no-untyped-call]
        opt_g.step()
        losses.append(loss_mel.item())
        if (step + 1) % 200 == 0 or step + 1 == cfg.steps:
            say(
                f"  vocoder step {step + 1}/{cfg.steps}: mel L1 {losses[-1]:.3f}"
                f"{' (GAN)' if adversarial else ''}, {time.monotonic() - started:.0f} s"
            )
    return gen.state_dict(), losses


def training_files(utts: Sequence[Any]) -> list[Path]:
    """The bona fide files the vocoder learns from: the speakers pinned to train."""
    from detectors.synthetic.corpus import PINNED

    return sorted(
        u.path for u in utts if u.label == "bonafide" and PINNED.get(u.speaker) == "train"
    )


def ensure(
    work: Path,
    utts: Sequence[Any],
    cfg: VocoderConfig,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The trained vocoder's state-dict path in ``work``, training it first if absent."""
    import torch

    files = training_files(utts)
    if not files:
        raise ValueError("no bona fide file of a speaker pinned to train")
    path = work / f"vocoder-{cache_key(cfg, files)}.pt"
    if path.is_file():
        return path
    say = progress or (lambda msg: None)
    say(f"training the neural vocoder on {len(files)} files ({cfg.steps} steps)")
    state, _ = train([load_8k(f) for f in files], cfg, progress)
    work.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    torch.save({"channels": cfg.channels, "harmonics": cfg.harmonics, "state": state}, tmp)
    tmp.replace(path)
    return path


@cache
def _generator(path: Path) -> Any:
    import torch

    saved = torch.load(path, map_location="cpu", weights_only=True)
    _, gen_cls, _ = _nets()
    gen = gen_cls(int(saved["channels"]), int(saved["harmonics"]))
    gen.load_state_dict(saved["state"])
    return gen.eval()


def copy_synthesis(model: Path, x: FloatArray, seed: int) -> FloatArray:
    """``x`` (8 kHz) through the vocoder at ``model``: the same words, voice and level,
    every sample regenerated from the mel spectrogram; ``seed`` draws the excitation's
    noise, so the copy is a function of it (as every generator's output is of its seed)."""
    import torch

    mel_spec_cls, _, _ = _nets()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # generation runs one file per worker process
    try:
        with torch.no_grad():
            t = torch.from_numpy(np.ascontiguousarray(x, np.float32))[None]
            f0 = torch.from_numpy(f0_frames(x))[None]
            rng = torch.Generator().manual_seed(seed)
            y = _generator(model)(mel_spec_cls()(t), f0, rng)[0, : len(x)].numpy()
    finally:
        torch.set_num_threads(threads)
    return np.asarray(y, np.float32)
