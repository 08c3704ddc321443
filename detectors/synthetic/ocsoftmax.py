"""One-class softmax (``train-synthetic --loss ocsoftmax``): a head that learns a compact
region for bona fide speech and pushes every spoof out of it, instead of a boundary
between the bona fide and the spoof families it was shown.

Zhang, Jiang, Chen, "One-class learning towards synthetic voice spoofing detection"
(IEEE SPL 2021): the network's embedding ``e`` and a learnt direction ``w`` give the score
``s = cos(w, e)``; the loss is ``softplus(alpha (m0 - s))`` for bona fide (pulled above
``m0``) and ``softplus(alpha (s - m1))`` for spoof (pushed below ``m1``), with
``m0 > m1``. The paper's case is ours: it was made for attacks absent from training.
This is our own formulation of that loss for the CNN and AASIST networks here (torch,
training and export only; imported inside ``wrap``). Measured with the default recipe at
two seeds (docs/models/synthetic_voice.md, "One-class softmax loss"): worse than the
cross-entropy on dev and test, on the never-trained generators too, so it stays opt-in.

The exported graph keeps the runtime's contract, one P(spoof)-like value in [0, 1]:
``(1 - s) / 2`` (monotonic in the score, never saturating, so thresholds near the top of
the genuine scores keep their resolution).
"""

from __future__ import annotations

from typing import Any

MARGIN_BONAFIDE = 0.9  # m0, the paper's
MARGIN_SPOOF = 0.2  # m1
ALPHA = 20.0  # the scale of the margins in the softplus
VERSION = 1  # bump when the head or the loss changes (the stage cache key)


def loss(cosine: Any, label: Any) -> Any:
    """The mean one-class softmax loss of a batch: ``cosine`` [B] the score, ``label``
    [B] 1 = spoof (torch tensors)."""
    import torch

    bona = torch.nn.functional.softplus(ALPHA * (MARGIN_BONAFIDE - cosine))
    spoof = torch.nn.functional.softplus(ALPHA * (cosine - MARGIN_SPOOF))
    return torch.where(label > 0.5, spoof, bona).mean()


def wrap(net: Any) -> Any:
    """The one-class head around ``net``, which must have ``embed(wave) -> [B, D]`` and
    ``embed_dim``. ``cosine`` (training) and ``forward`` ((1 - cosine) / 2, [B, 1],
    the exported output)."""
    import torch
    from torch import Tensor, nn

    class OneClass(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.center = nn.Parameter(torch.randn(1, net.embed_dim))

        def cosine(self, wave: Tensor) -> Tensor:  # [B, S] -> [B]
            e = nn.functional.normalize(self.net.embed(wave), dim=1, eps=1e-8)
            c = nn.functional.normalize(self.center, dim=1, eps=1e-8)
            out: Tensor = (e * c).sum(dim=1)
            return out

        def forward(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1] in [0, 1]
            return ((1.0 - self.cosine(wave)) * 0.5).unsqueeze(1)

    model = OneClass()
    model.eval()
    return model
