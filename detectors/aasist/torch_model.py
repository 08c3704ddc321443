"""Our PyTorch implementation of AASIST (Jung et al., ICASSP 2022), for conversion only.

Written from the paper's description and the published checkpoints' parameter names
and shapes (module names follow the state dict so ``load_state_dict(strict=True)``
accounts for every tensor). Inference only: dropout and the training-time frequency
mask are omitted (they are identities in eval mode).

    sinc band-pass conv (fixed) -> |.| -> 3x3 max-pool -> BN -> SELU
    -> 6 residual blocks (2-D conv over [spectral, temporal])
    -> spectral graph: max_t |e| + positional embedding -> GAT -> graph pool
    -> temporal graph: max_f |e| -> GAT -> graph pool
    -> two branches of 2 heterogeneous stacking GALs (HS-GAL) with a stack node each
    -> max graph operation (element-wise max of the branches)
    -> readout [T max|.|, T mean, S max|.|, S mean, stack] -> Linear(5 x dim, 2)

Output logits [spoof, bona fide] (index 1 is the published score: higher = genuine).

torch is imported inside ``build_model``: importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any

from detectors.aasist.config import AasistConfig, sinc_bank


def build_model(cfg: AasistConfig, *, literal_residual: bool = True) -> Any:
    """An ``nn.Module`` for ``cfg`` in eval mode, with random weights (load a checkpoint).

    ``literal_residual``: in the published checkpoints' residual blocks, the first
    convolution reads the block's input directly; the block's leading BN + SELU
    (``bn1``, present in every non-first block's parameters) is computed but does not
    feed it. True reproduces the network the checkpoints were trained as; False is the
    textbook pre-activation block (kept only to show, in tests, that it is not).
    """
    import torch
    import torch.nn.functional as func
    from torch import Tensor, nn

    class SincFrontEnd(nn.Module):
        """Fixed mel-spaced band-pass filters: a constant, not a parameter (nothing in
        the state dict; the export bakes it in)."""

        def __init__(self) -> None:
            super().__init__()
            self.bank = torch.from_numpy(sinc_bank(cfg.n_sinc, cfg.sinc_taps, cfg.sample_rate))

        def forward(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 1, F, T]
            y = func.conv1d(wave.unsqueeze(1), self.bank, stride=cfg.sinc_stride)
            return y.unsqueeze(1)

    class ResidualBlock(nn.Module):
        def __init__(self, cin: int, cout: int, first: bool, pool: int = 3) -> None:
            super().__init__()
            self.first = first
            self.pool = pool
            if not first:
                self.bn1 = nn.BatchNorm2d(cin)
            self.conv1 = nn.Conv2d(cin, cout, kernel_size=(2, 3), padding=(1, 1))
            self.bn2 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, kernel_size=(2, 3), padding=(0, 1))
            self.project = cin != cout
            if self.project:
                self.conv_downsample = nn.Conv2d(cin, cout, kernel_size=(1, 3), padding=(0, 1))

        def forward(self, x: Tensor) -> Tensor:
            h = x
            if not self.first and not literal_residual:
                h = func.selu(self.bn1(x))
            h = self.conv1(h)
            h = self.conv2(func.selu(self.bn2(h)))
            skip = self.conv_downsample(x) if self.project else x
            return func.max_pool2d(h + skip, kernel_size=(1, self.pool))

    def pairwise(x: Tensor) -> Tensor:
        """[B, N, D] -> [B, N, N, D]: element-wise products of every node pair."""
        return x.unsqueeze(2) * x.unsqueeze(1)

    def node_bn(bn: nn.BatchNorm1d, x: Tensor) -> Tensor:
        """Batch norm over the feature axis of [B, N, D] node features."""
        b, n, d = x.shape
        out: Tensor = bn(x.reshape(-1, d)).reshape(b, n, d)
        return out

    class GraphAttention(nn.Module):
        """GAT over a homogeneous graph (fully connected, self-loops): attention from
        the tanh-projected products of node pairs, softmax over neighbours with a
        temperature; output = W_att (A x) + W_res x -> BN -> SELU."""

        def __init__(self, din: int, dout: int, temperature: float) -> None:
            super().__init__()
            self.att_proj = nn.Linear(din, dout)
            self.att_weight = nn.Parameter(torch.empty(dout, 1))
            self.proj_with_att = nn.Linear(din, dout)
            self.proj_without_att = nn.Linear(din, dout)
            self.bn = nn.BatchNorm1d(dout)
            self.temperature = temperature

        def forward(self, x: Tensor) -> Tensor:
            logits = torch.tanh(self.att_proj(pairwise(x))) @ self.att_weight  # [B,N,N,1]
            att = torch.softmax(logits.squeeze(-1) / self.temperature, dim=-1)
            h = self.proj_with_att(att @ x) + self.proj_without_att(x)
            return func.selu(node_bn(self.bn, h))

    class HeteroStackingAttention(nn.Module):
        """HS-GAL: temporal (type 1) and spectral (type 2) nodes projected into one
        space and joined into one graph; attention weights differ for T-T, S-S and the
        cross edges (T-S and S-T share one); a stack node attends to every node and is
        updated from them."""

        def __init__(self, din: int, dout: int, temperature: float) -> None:
            super().__init__()
            self.proj_type1 = nn.Linear(din, din)
            self.proj_type2 = nn.Linear(din, din)
            self.att_proj = nn.Linear(din, dout)
            self.att_projM = nn.Linear(din, dout)
            self.att_weight11 = nn.Parameter(torch.empty(dout, 1))
            self.att_weight22 = nn.Parameter(torch.empty(dout, 1))
            self.att_weight12 = nn.Parameter(torch.empty(dout, 1))
            self.att_weightM = nn.Parameter(torch.empty(dout, 1))
            self.proj_with_att = nn.Linear(din, dout)
            self.proj_without_att = nn.Linear(din, dout)
            self.proj_with_attM = nn.Linear(din, dout)
            self.proj_without_attM = nn.Linear(din, dout)
            self.bn = nn.BatchNorm1d(dout)
            self.temperature = temperature

        def forward(self, xt: Tensor, xs: Tensor, stack: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            n1 = xt.shape[1]
            x = torch.cat([self.proj_type1(xt), self.proj_type2(xs)], dim=1)  # [B, N, D]
            n = x.shape[1]
            # Stack node: attention over all nodes from tanh(W (x_i * stack)).
            m_logits = torch.tanh(self.att_projM(x * stack)) @ self.att_weightM  # [B,N,1]
            m_att = torch.softmax(m_logits / self.temperature, dim=1)  # over nodes
            new_stack = self.proj_with_attM(m_att.transpose(1, 2) @ x) + self.proj_without_attM(
                stack
            )
            # Node attention with a weight vector per edge type.
            hid = torch.tanh(self.att_proj(pairwise(x)))  # [B, N, N, dout]
            weights = torch.stack(
                [
                    self.att_weight11.squeeze(-1),
                    self.att_weight12.squeeze(-1),
                    self.att_weight22.squeeze(-1),
                ]
            )  # [3, dout]
            is_t = torch.arange(n, device=x.device) < n1
            kind = torch.where(is_t[:, None] & is_t[None, :], 0, 1)
            kind = torch.where(~is_t[:, None] & ~is_t[None, :], 2, kind)  # [N, N]
            w = weights[kind]  # [N, N, dout]
            logits = (hid * w).sum(-1)  # [B, N, N]
            att = torch.softmax(logits / self.temperature, dim=-1)
            h = self.proj_with_att(att @ x) + self.proj_without_att(x)
            h = func.selu(node_bn(self.bn, h))
            return h[:, :n1], h[:, n1:], new_stack

    class GraphPool(nn.Module):
        """Keeps the ``k`` nodes with the highest sigmoid(W x) scores (in descending
        score order) and scales every kept node by its score."""

        def __init__(self, dim: int, k: int) -> None:
            super().__init__()
            self.proj = nn.Linear(dim, 1)
            self.k = k

        def forward(self, x: Tensor) -> Tensor:
            scores = torch.sigmoid(self.proj(x))  # [B, N, 1]
            _, idx = torch.topk(scores, self.k, dim=1)  # sorted, descending
            idx = idx.expand(-1, -1, x.shape[-1])
            return torch.gather(x * scores, 1, idx)

    class Aasist(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d0, d1 = cfg.gat_dims
            enc = cfg.encoder_dim
            n_s, _ = cfg.grid()
            k = cfg.node_counts()
            temps = cfg.temperatures
            self.front = SincFrontEnd()
            self.first_bn = nn.BatchNorm2d(1)
            # Each block sits in its own Sequential (the checkpoint's "encoder.i.0").
            self.encoder = nn.Sequential(
                *[
                    nn.Sequential(ResidualBlock(cin, cout, first=i == 0, pool=pool))
                    for i, ((cin, cout), pool) in enumerate(
                        zip(cfg.blocks, cfg.time_pools, strict=True)
                    )
                ]
            )
            self.pos_S = nn.Parameter(torch.zeros(1, n_s, enc))
            self.master1 = nn.Parameter(torch.zeros(1, 1, d0))
            self.master2 = nn.Parameter(torch.zeros(1, 1, d0))
            self.GAT_layer_S = GraphAttention(enc, d0, temps[0])
            self.GAT_layer_T = GraphAttention(enc, d0, temps[1])
            self.HtrgGAT_layer_ST11 = HeteroStackingAttention(d0, d1, temps[2])
            self.HtrgGAT_layer_ST12 = HeteroStackingAttention(d1, d1, temps[2])
            self.HtrgGAT_layer_ST21 = HeteroStackingAttention(d0, d1, temps[2])
            self.HtrgGAT_layer_ST22 = HeteroStackingAttention(d1, d1, temps[2])
            self.pool_S = GraphPool(d0, k["S"])
            self.pool_T = GraphPool(d0, k["T"])
            self.pool_hS1 = GraphPool(d1, k["hS"])
            self.pool_hT1 = GraphPool(d1, k["hT"])
            self.pool_hS2 = GraphPool(d1, k["hS"])
            self.pool_hT2 = GraphPool(d1, k["hT"])
            self.out_layer = nn.Linear(5 * d1, 2)

        def branch(
            self,
            t: Tensor,
            s: Tensor,
            stack: Tensor,
            first: nn.Module,
            second: nn.Module,
            pool_s: nn.Module,
            pool_t: nn.Module,
        ) -> tuple[Tensor, Tensor, Tensor]:
            t1, s1, m1 = first(t, s, stack)
            s1 = pool_s(s1)
            t1 = pool_t(t1)
            t2, s2, m2 = second(t1, s1, m1)
            return t1 + t2, s1 + s2, m1 + m2

        def forward(self, wave: Tensor) -> Tensor:
            logits: Tensor = self.out_layer(self.hidden(wave))
            return logits

        def hidden(self, wave: Tensor) -> Tensor:  # [B, S] -> [B, 5 * gat_dims[1]]
            b = wave.shape[0]
            x = func.max_pool2d(torch.abs(self.front(wave)), kernel_size=cfg.first_pool)
            x = func.selu(self.first_bn(x))
            e = torch.abs(self.encoder(x))  # [B, C, F, T]
            spec = e.amax(dim=3).transpose(1, 2) + self.pos_S  # [B, F, C]
            temp = e.amax(dim=2).transpose(1, 2)  # [B, T, C]
            s = self.pool_S(self.GAT_layer_S(spec))
            t = self.pool_T(self.GAT_layer_T(temp))
            t1, s1, m1 = self.branch(
                t,
                s,
                self.master1.expand(b, -1, -1),
                self.HtrgGAT_layer_ST11,
                self.HtrgGAT_layer_ST12,
                self.pool_hS1,
                self.pool_hT1,
            )
            t2, s2, m2 = self.branch(
                t,
                s,
                self.master2.expand(b, -1, -1),
                self.HtrgGAT_layer_ST21,
                self.HtrgGAT_layer_ST22,
                self.pool_hS2,
                self.pool_hT2,
            )
            t = torch.maximum(t1, t2)
            s = torch.maximum(s1, s2)
            m = torch.maximum(m1, m2)
            hidden = torch.cat(
                [
                    t.abs().amax(dim=1),
                    t.mean(dim=1),
                    s.abs().amax(dim=1),
                    s.mean(dim=1),
                    m.squeeze(1),
                ],
                dim=1,
            )
            return hidden

    model = Aasist()
    model.eval()
    return model
