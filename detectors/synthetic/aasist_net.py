"""``train-synthetic --arch aasist``: our AASIST (``detectors.aasist.torch_model``) at
native 8 kHz on the same 3 s window as the CNN, trained from scratch (torch, training and
export only).

    waveform [B, 24000] at 8 kHz (int16 / 32768, raw: no level normalisation)
    -> the AASIST graph network with an 8 kHz sinc front end (CONFIG: mel-spaced band-pass
       filters over 0-4 kHz, 65 taps, half the 16 kHz model's 129) and AASIST-L-like dims
    -> logits [spoof, bona fide] -> logit = spoof - bona fide -> sigmoid: P(spoof)

Same interface as ``detectors.synthetic.model`` (``logit`` for training, ``forward`` =
P(spoof) for export), so windowing, thresholds and the runtime need no change. torch is
imported inside ``build_model``.
"""

from __future__ import annotations

from typing import Any

from detectors.aasist.config import AasistConfig

RATE = 8_000
WINDOW = 3 * RATE

# AASIST-L's graph dims and pool ratios; the sinc bank at 8 kHz (half the taps); the
# encoder narrowed from AASIST-L's (32, 32, 24, 24 x 3) channels to fit 40 calls on two
# cores (docs/models/synthetic_voice.md, "AASIST at 8 kHz": cost per window).
CONFIG = AasistConfig(
    variant="AASIST-8k",
    nb_samp=WINDOW,
    first_conv=64,
    n_sinc=48,
    blocks=((1, 16), (16, 16), (16, 24), (24, 24), (24, 24), (24, 24)),
    gat_dims=(24, 32),
    pool_ratios=(0.4, 0.5, 0.7, 0.5),
    temperatures=(2.0, 2.0, 100.0, 100.0),
    sample_rate=RATE,
)

# ``--arch aasist-lite``: the same network class ~3.4x cheaper per window (6.9 vs 23.5 ms,
# one thread; docs/models/synthetic_voice.md, "AASIST-lite"). The full-resolution stages
# dominated (block 0's SELU and convolutions, the sinc convolution, layout reorders):
# the sinc convolution strides 3 samples (its |.| and 3x3 max-pool already keep one value
# in 3), the first two blocks are narrowed to 8 and 16 channels, and the last two blocks
# pool time by 2 instead of 3, so the graphs keep 16 spectral x 8 temporal nodes.
LITE_CONFIG = AasistConfig(
    variant="AASIST-lite-8k",
    nb_samp=WINDOW,
    first_conv=64,
    n_sinc=48,
    blocks=((1, 8), (8, 16), (16, 24), (24, 24), (24, 24), (24, 24)),
    gat_dims=(24, 32),
    pool_ratios=(0.4, 0.5, 0.7, 0.5),
    temperatures=(2.0, 2.0, 100.0, 100.0),
    sample_rate=RATE,
    sinc_stride=3,
    block_pools=(3, 3, 3, 3, 2, 2),
)
CONFIGS = {"aasist": CONFIG, "aasist-lite": LITE_CONFIG}


def build_model(cfg: AasistConfig = CONFIG) -> Any:
    """A trainable P(spoof) module around ``detectors.aasist.torch_model.build_model``,
    freshly initialised as the reference does (attention vectors Xavier-normal, the
    positional embedding and the two stack nodes standard normal)."""
    import torch
    from torch import Tensor, nn

    from detectors.aasist.torch_model import build_model as build_aasist

    class AasistSpoof(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = build_aasist(cfg)
            for name, p in self.net.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("att_weight"):
                    nn.init.xavier_normal_(p)
                elif name in ("pos_S", "master1", "master2"):
                    nn.init.normal_(p)

        embed_dim = 5 * cfg.gat_dims[1]

        def embed(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, embed_dim] (ocsoftmax)
            hidden: Tensor = self.net.hidden(wave)
            return hidden

        def logit(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1]
            out = self.net(wave)
            logit: Tensor = (out[:, 0] - out[:, 1]).unsqueeze(1)
            return logit

        def forward(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1] P(spoof)
            return torch.sigmoid(self.logit(wave))

    model = AasistSpoof()
    model.eval()
    return model
