"""Phase-derivative input channels for ``train-synthetic --arch cnn-phase`` (torch,
training and export only).

From the framed DFT (re, im: [B, bins, T], frames starting at t * hop, phase referred to
the frame start, periodic Hann):

- **instantaneous-frequency deviation**: the unit phasor of X_t conj(X_{t-1}) rotated by
  exp(-j 2 pi k hop / n_fft), the advance a stationary sinusoid at bin k's centre makes
  in one hop; ~(1, 0) for such a sinusoid, the first frame padded with zeros;
- **frequency-direction phase difference**: the unit phasor of X_k conj(X_{k-1}) rotated
  by pi (the step a Hann frame's energy at its centre makes between bins), so a pulse
  at the frame centre gives ~(1, 0) and a pulse d samples later a constant
  angle -2 pi d / n_fft in every bin (a linear phase across frequency); bin 0 padded
  with zeros.

Each as (cos, sin) = (real, imaginary) of the unit phasor, computed with Mul / Add / Div /
Sqrt only (no atan2), so the graph exports to ONNX opset 17. ``gate`` (on by default in
the network): each phasor weighted by |P| / (|P| + GATE_REL * the window's mean power),
P the product, so bins more than ~20 dB below the window's mean power (silence, the
noise floor) fade to 0 instead of being uniform noise; the phase itself is unchanged.
"""

from __future__ import annotations

import math
from typing import Any

EPS = 1e-12  # |P| + EPS: digital silence gives (0, 0), not NaN
GATE_REL = 1e-2  # the soft gate's half point: 20 dB below the window's mean power


def advance(bins: int, n_fft: int, hop: int) -> tuple[list[float], list[float]]:
    """cos and sin of the expected one-hop phase advance 2 pi k hop / n_fft per bin."""
    ang = [2 * math.pi * k * hop / n_fft for k in range(bins)]
    return [math.cos(a) for a in ang], [math.sin(a) for a in ang]


def _unit(pr: Any, pi: Any) -> tuple[Any, Any, Any]:
    import torch

    mag = torch.sqrt(pr * pr + pi * pi)
    return pr / (mag + EPS), pi / (mag + EPS), mag


def phase_channels(re: Any, im: Any, cos_w: Any, sin_w: Any, gate: bool = True) -> Any:
    """[B, bins, T] real and imaginary parts -> [B, 4, bins, T]: IF deviation (cos, sin)
    and frequency-direction phase difference (cos, sin); ``cos_w``, ``sin_w``: [bins, 1]
    tensors of ``advance``."""
    import torch

    # time direction: P = X_t conj(X_{t-1}), rotated by exp(-j w_k)
    a, b = re[:, :, 1:], im[:, :, 1:]
    c, d = re[:, :, :-1], im[:, :, :-1]
    pr, pi = a * c + b * d, b * c - a * d
    rr, ri = pr * cos_w + pi * sin_w, pi * cos_w - pr * sin_w
    tc, ts, tmag = _unit(rr, ri)
    # frequency direction: Q = X_k conj(X_{k-1}), rotated by pi (negated)
    a, b = re[:, 1:], im[:, 1:]
    c, d = re[:, :-1], im[:, :-1]
    qr, qi = -(a * c + b * d), -(b * c - a * d)
    fc, fs, fmag = _unit(qr, qi)
    if gate:
        power = (re * re + im * im).mean(dim=(1, 2), keepdim=True) * GATE_REL
        gt, gf = tmag / (tmag + power + EPS), fmag / (fmag + power + EPS)
        tc, ts, fc, fs = tc * gt, ts * gt, fc * gf, fs * gf
    pad_t = torch.nn.functional.pad
    time = [pad_t(x, (1, 0)) for x in (tc, ts)]  # frame 0: no previous frame
    freq = [pad_t(x, (0, 0, 1, 0)) for x in (fc, fs)]  # bin 0: no lower bin
    return torch.stack(time + freq, dim=1)
