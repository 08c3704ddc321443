"""AASIST hyper-parameters (the checkpoints' ``model_config``) and the fixed sinc front end.

Numpy only: importing this module never imports torch.

Shapes through the network for the published 64,600-sample input (4.04 s at 16 kHz):
sinc conv (70 filters, 129 taps, valid) -> [70, 64472]; |.| and 3x3 max-pool ->
[23, 21490]; six residual blocks, each a (1, 3) max-pool in time -> 23 spectral x 29
temporal positions. Graph pooling keeps ``int(n * ratio)`` nodes at each stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16_000
WINDOW = 64_600  # samples (≈ 4.04 s), the published model's fixed input


@dataclass(frozen=True, slots=True)
class AasistConfig:
    """``model_config`` of the published .conf files (only the fields the network uses)."""

    variant: str
    nb_samp: int
    first_conv: int  # sinc taps as configured (an even count gets one more tap: odd, centred)
    n_sinc: int
    blocks: tuple[tuple[int, int], ...]  # (in, out) channels of the six residual blocks
    gat_dims: tuple[int, int]
    pool_ratios: tuple[float, float, float, float]
    temperatures: tuple[float, float, float, float]
    sample_rate: int = SAMPLE_RATE  # the sinc bank spans 0 .. sample_rate / 2 (mel-spaced)
    # Cheaper front ends (``--arch aasist-lite``); the defaults are the published network's.
    sinc_stride: int = 1  # the sinc convolution's stride in time
    first_pool: tuple[int, int] = (3, 3)  # (spectral, temporal) max-pool after |sinc|
    block_pools: tuple[int, ...] = ()  # each residual block's max-pool in time; () = 3 each

    @property
    def sinc_taps(self) -> int:
        return self.first_conv + 1 if self.first_conv % 2 == 0 else self.first_conv

    @property
    def encoder_dim(self) -> int:
        return self.blocks[-1][1]

    def grid(self) -> tuple[int, int]:
        """(spectral, temporal) positions at the encoder's output."""
        freq = self.n_sinc // self.first_pool[0]
        time = ((self.nb_samp - self.sinc_taps) // self.sinc_stride + 1) // self.first_pool[1]
        for pool in self.time_pools:
            time //= pool
        return freq, time

    def key_repr(self) -> str:
        """``repr`` without the cheaper-front-end fields where they hold their defaults:
        the text cache keys of trained state dicts are made of, unchanged for every
        configuration that existed before those fields did."""
        text = repr(self)
        legacy = ", sinc_stride=1, first_pool=(3, 3), block_pools=())"
        return text[: -len(legacy)] + ")" if text.endswith(legacy) else text

    @property
    def time_pools(self) -> tuple[int, ...]:
        """Each residual block's max-pool in time (the published networks: 3 each)."""
        return self.block_pools or (3,) * len(self.blocks)

    def node_counts(self) -> dict[str, int]:
        """Nodes kept by each graph pooling (computed like the reference: int(n * k))."""
        n_s, n_t = self.grid()
        s = max(int(n_s * self.pool_ratios[0]), 1)
        t = max(int(n_t * self.pool_ratios[1]), 1)
        hs = max(int(s * self.pool_ratios[2]), 1)
        ht = max(int(t * self.pool_ratios[2]), 1)
        return {"S": s, "T": t, "hS": hs, "hT": ht}

    @classmethod
    def from_model_config(cls, variant: str, mc: dict[str, Any]) -> AasistConfig:
        filts = mc["filts"]
        chans = [tuple(int(c) for c in f) for f in filts[1:]]
        # The encoder repeats the last block shape: 1 + 1 + 1 + 3 blocks.
        blocks = (chans[0], chans[1], chans[2], chans[3], chans[3], chans[3])
        return cls(
            variant=variant,
            nb_samp=int(mc["nb_samp"]),
            first_conv=int(mc["first_conv"]),
            n_sinc=int(filts[0]),
            blocks=tuple((a, b) for a, b in blocks),
            gat_dims=(int(mc["gat_dims"][0]), int(mc["gat_dims"][1])),
            pool_ratios=tuple(float(r) for r in mc["pool_ratios"]),  # type: ignore[arg-type]
            temperatures=tuple(float(t) for t in mc["temperatures"]),  # type: ignore[arg-type]
        )

    @classmethod
    def from_conf_file(cls, path: Path, variant: str | None = None) -> AasistConfig:
        mc = json.loads(path.read_text(encoding="utf-8"))["model_config"]
        return cls.from_model_config(variant or path.stem, mc)


# The two published configurations (AASIST.conf / AASIST-L.conf, model_config).
VARIANTS: dict[str, AasistConfig] = {
    "AASIST": AasistConfig.from_model_config(
        "AASIST",
        {
            "nb_samp": WINDOW,
            "first_conv": 128,
            "filts": [70, [1, 32], [32, 32], [32, 64], [64, 64]],
            "gat_dims": [64, 32],
            "pool_ratios": [0.5, 0.7, 0.5, 0.5],
            "temperatures": [2.0, 2.0, 100.0, 100.0],
        },
    ),
    "AASIST-L": AasistConfig.from_model_config(
        "AASIST-L",
        {
            "nb_samp": WINDOW,
            "first_conv": 128,
            "filts": [70, [1, 32], [32, 32], [32, 24], [24, 24]],
            "gat_dims": [24, 32],
            "pool_ratios": [0.4, 0.5, 0.7, 0.5],
            "temperatures": [2.0, 2.0, 100.0, 100.0],
        },
    ),
}


def _hz_to_mel(hz: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return np.asarray(2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0))


def _mel_to_hz(mel: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return np.asarray(700.0 * (10.0 ** (np.asarray(mel, np.float64) / 2595.0) - 1.0))


def sinc_bank(n_filters: int, taps: int, rate: int = SAMPLE_RATE) -> npt.NDArray[np.float32]:
    """The fixed front end (RawNet2-style, as the paper describes): ``n_filters`` ideal
    band-pass filters whose edges are equally spaced on the mel scale over 0..rate/2,
    each the difference of two low-pass sincs with cutoffs normalised by the rate,
    times a (symmetric) Hamming window. Returns float32 ``[n_filters, 1, taps]``."""
    edges = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(rate / 2)), n_filters + 1))
    n = np.arange(taps, dtype=np.float64) - (taps - 1) / 2.0
    lo = edges[:-1, None] / rate
    hi = edges[1:, None] / rate
    ideal = 2.0 * hi * np.sinc(2.0 * hi * n) - 2.0 * lo * np.sinc(2.0 * lo * n)
    bank = ideal * np.hamming(taps)[None, :]
    return bank.astype(np.float32)[:, None, :]
