"""The synthetic_voice network (torch, training and export only).

    waveform [B, S] at 8 kHz (int16 / 32768, no other normalisation)
    -> framed DFT as a fixed Conv1d (Hann, n_fft 256 = 32 ms, hop 80 = 10 ms)
    -> log power [B, 129, T], minus its mean over the window (level invariance)
       (``phase``, arch cnn-phase: plus four phase-derivative channels, ``phase.py``:
       instantaneous-frequency deviation and frequency-direction phase difference, each
       cos and sin, soft-gated by magnitude; input [B, 5, 129, T])
    -> 4 conv stages (3x3 conv, BatchNorm, ReLU; 2x2 max-pool after the first three)
    -> mean and max over time of the [channels x frequency] features
    -> dropout -> Linear -> one logit -> sigmoid: P(spoof) (``forward``; ``logit`` for
       training with a numerically stable loss)

The front end lives inside the graph, so the runtime hands the model raw windows like
every other model detector. torch is imported inside ``build_model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.synthetic import phase


@dataclass(frozen=True, slots=True)
class NetConfig:
    n_fft: int = 256
    hop: int = 80
    channels: tuple[int, ...] = (16, 32, 48, 64)
    dropout: float = 0.3
    phase: bool = False  # arch cnn-phase: the four phase channels beside log power

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1


def dft_kernels(n_fft: int) -> npt.NDArray[np.float32]:
    """[2 * bins, 1, n_fft]: Hann-windowed cosines then sines (real and imaginary)."""
    n = np.arange(n_fft)
    k = np.arange(n_fft // 2 + 1)[:, None]
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann
    ang = 2 * np.pi * k * n / n_fft
    kern = np.concatenate([np.cos(ang) * window, -np.sin(ang) * window])
    return kern.astype(np.float32)[:, None, :]


def build_model(cfg: NetConfig | None = None) -> Any:
    import torch
    from torch import Tensor, nn

    net = cfg or NetConfig()

    class SyntheticVoiceNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dft: Tensor
            self.register_buffer("dft", torch.from_numpy(dft_kernels(net.n_fft)))
            if net.phase:  # buffers only here: the CNN's state dict keeps its keys
                cos_w, sin_w = phase.advance(net.bins, net.n_fft, net.hop)
                self.register_buffer("cos_w", torch.tensor(cos_w).unsqueeze(1))
                self.register_buffer("sin_w", torch.tensor(sin_w).unsqueeze(1))
            layers: list[nn.Module] = []
            cin = 5 if net.phase else 1
            for i, c in enumerate(net.channels):
                layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
                if i < len(net.channels) - 1:
                    layers.append(nn.MaxPool2d(2))
                cin = c
            self.body = nn.Sequential(*layers)
            freq = net.bins
            for _ in net.channels[:-1]:
                freq //= 2
            self.drop = nn.Dropout(net.dropout)
            self.embed_dim = 2 * cin * freq
            self.head = nn.Linear(self.embed_dim, 1)

        def features(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1 or 5, F, T]
            dft: Tensor = self.dft
            spec = nn.functional.conv1d(wave.unsqueeze(1), dft, stride=net.hop)
            re, im = spec[:, : net.bins], spec[:, net.bins :]
            logp = torch.log(re * re + im * im + 1e-8)
            logp = (logp - logp.mean(dim=(1, 2), keepdim=True)).unsqueeze(1)
            if not net.phase:
                return logp
            chans: Tensor = phase.phase_channels(re, im, self.cos_w, self.sin_w)
            return torch.cat([logp, chans], dim=1)

        def embed(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, embed_dim]
            x = self.body(self.features(wave))  # [B, C, F, T]
            x = x.flatten(1, 2)  # [B, C * F, T]
            return torch.cat([x.mean(dim=2), x.amax(dim=2)], dim=1)

        def logit(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1]
            out: Tensor = self.head(self.drop(self.embed(wave)))
            return out

        def forward(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1] P(spoof)
            return torch.sigmoid(self.logit(wave))

    return SyntheticVoiceNet()
