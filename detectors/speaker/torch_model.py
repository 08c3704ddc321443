"""CallShield's PyTorch implementation of the voice-encoder architecture Resemblyzer
publishes (GE2E-trained d-vector encoder): power-mel front end (``frontend``), a
3-layer LSTM with 256 hidden units over 160-frame partials, a 256 → 256 linear
projection, ReLU and L2 normalisation per partial; the window's embedding is the
L2-normalised mean of its partials.

Only the offline conversion (``detectors.speaker.deriver``) imports this module: it is
where torch is needed, and the ONNX graph exported from it carries the whole chain,
front end included, from a fixed-length 16 kHz waveform to the embedding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detectors.speaker.frontend import (
    HOP,
    N_FFT,
    N_MELS,
    PARTIAL_FRAMES,
    RMS_FLOOR,
    TARGET_DBFS,
    dft_kernels,
    mel_matrix,
    partial_plan,
)

HIDDEN = 256
LAYERS = 3
EMBEDDING = 256


def build_window_embedder(samples: int) -> Any:
    """A ``WindowEmbedder`` for windows of ``samples`` (torch is imported here, so this
    module imports without it)."""
    import torch
    from torch import nn

    class VoiceEncoder(nn.Module):
        """The encoder proper: mels [N, frames, 40] → L2-normalised embeddings [N, 256]. Its
        parameter names are those of the published state dict (``lstm.*``, ``linear.*``)."""

        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(N_MELS, HIDDEN, LAYERS, batch_first=True)
            self.linear = nn.Linear(HIDDEN, EMBEDDING)

        def forward(self, mels: torch.Tensor) -> torch.Tensor:
            _, (h_n, _) = self.lstm(mels)
            z = torch.relu(self.linear(h_n[-1]))
            out: torch.Tensor = z / torch.linalg.vector_norm(z, dim=1, keepdim=True).clamp_min(
                1e-12
            )
            return out

    class WindowEmbedder(nn.Module):
        """waveform [B, samples] (16 kHz, float in [-1, 1]) → (embedding [B, 256], score [B]).

        ``score`` is always 0: a voiceprint alone carries no risk; the speaker detectors
        compare embeddings (against a watchlist, an enrolment, earlier windows)."""

        dft: torch.Tensor
        mel: torch.Tensor
        index: torch.Tensor

        def __init__(self, samples: int) -> None:
            super().__init__()
            plan = partial_plan(samples)
            self.samples = samples
            self.pad_end = plan.padded - samples
            self.n_partials = len(plan.starts)
            re, im = dft_kernels()
            kernel = np.concatenate([re, im])[:, None, :].astype(np.float32)  # [402, 1, 400]
            self.register_buffer("dft", torch.from_numpy(kernel), persistent=False)
            mel = mel_matrix().astype(np.float32)  # [40, 201]
            self.register_buffer("mel", torch.from_numpy(mel), persistent=False)
            index = np.array([np.arange(s, s + PARTIAL_FRAMES) for s in plan.starts], np.int64)
            self.register_buffer("index", torch.from_numpy(index.reshape(-1)), persistent=False)
            self.encoder = VoiceEncoder()

        def mels(self, wav: torch.Tensor) -> torch.Tensor:
            """[B, samples] → [B, frames, 40] after the volume gain and end padding."""
            rms = torch.sqrt(torch.mean(wav * wav, dim=1, keepdim=True)).clamp_min(RMS_FLOOR)
            gain = torch.clamp(10.0 ** (TARGET_DBFS / 20.0) / rms, min=1.0)
            x = nn.functional.pad(wav * gain, (N_FFT // 2, N_FFT // 2 + self.pad_end))
            spec = nn.functional.conv1d(x.unsqueeze(1), self.dft, stride=HOP)  # [B, 402, F]
            half = spec.shape[1] // 2
            power = spec[:, :half] ** 2 + spec[:, half:] ** 2
            return torch.matmul(self.mel, power).transpose(1, 2)

        def forward(self, wav: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            mels = self.mels(wav)
            b = wav.shape[0]
            parts = torch.index_select(mels, 1, self.index)
            parts = parts.reshape(b * self.n_partials, PARTIAL_FRAMES, N_MELS)
            partial = self.encoder(parts).reshape(b, self.n_partials, EMBEDDING)
            mean = partial.mean(dim=1)
            emb = mean / torch.linalg.vector_norm(mean, dim=1, keepdim=True).clamp_min(1e-12)
            return emb, torch.zeros_like(emb[:, 0])

    return WindowEmbedder(samples)
