"""train-synthetic --arch aasist-lite: the cheaper AASIST-class configuration (strided sinc
front end, narrower first blocks, shorter late pools) has the grid its config promises,
exports to ONNX that agrees with torch at batch 1 and 5, keys its cache apart from every
other architecture, and leaves the published and the 8 kHz AASIST configurations (and so
their cached state dicts and imported checkpoints) as they were. Untrained weights only:
the model is never trained here (``callshield models train-synthetic --arch aasist-lite``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from detectors.aasist.config import VARIANTS
from detectors.synthetic import aasist_net, build, train


def test_lite_config_grid_and_defaults_of_the_others() -> None:
    lite = aasist_net.LITE_CONFIG
    assert lite.nb_samp == train.WINDOW and lite.sample_rate == 8000
    # (24,000 - 65) // 3 + 1 = 7,979 sinc frames -> /3 -> 2,659 -> /3/3/3/3/2/2 -> 8
    assert lite.grid() == (16, 8)
    assert lite.node_counts() == {"S": 6, "T": 4, "hS": 4, "hT": 2}
    for cfg in (*VARIANTS.values(), aasist_net.CONFIG):
        assert (cfg.sinc_stride, cfg.first_pool, cfg.time_pools) == (1, (3, 3), (3,) * 6)
        assert "sinc_stride" not in cfg.key_repr()  # keys as before the fields existed
    assert "sinc_stride=3" in lite.key_repr()
    assert aasist_net.CONFIG.grid() == (16, 10)
    keys = {
        train.stage_key(replace(build.LITE_TRAIN, arch=a), 1, ["espeak_en-us"]) for a in train.ARCHS
    }
    assert len(keys) == len(train.ARCHS)
    assert build.NAMES["aasist-lite"] == "callshield-aasist-lite-8k"


def test_strided_front_end_is_the_full_one_subsampled() -> None:
    import torch

    net = aasist_net.build_model(aasist_net.LITE_CONFIG).net
    full = aasist_net.build_model(aasist_net.CONFIG).net
    wave = torch.from_numpy(np.random.default_rng(5).standard_normal((2, 4_000)).astype("f4"))
    with torch.no_grad():
        strided, dense = net.front(wave), full.front(wave)
    assert strided.shape == (2, 1, 48, (4_000 - 65) // 3 + 1)
    assert torch.allclose(strided, dense[..., ::3], atol=1e-5)


def test_lite_onnx_export_shape_and_parity() -> None:
    import torch

    torch.manual_seed(0)
    model = aasist_net.build_model(aasist_net.LITE_CONFIG)
    seen: list[tuple[int, ...]] = []
    model.net.encoder.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    session = build.ort_session(build.export_onnx(model))
    rng = np.random.default_rng(11)
    for batch in (1, 5):
        waves = (0.1 * rng.standard_normal((batch, train.WINDOW))).astype(np.float32)
        with torch.no_grad():
            ref = model(torch.from_numpy(waves)).numpy()
        (got,) = session.run(None, {build.INPUT_NAME: waves})
        assert got.shape == ref.shape == (batch, 1)
        assert np.all((got >= 0) & (got <= 1))
        assert float(np.max(np.abs(got - ref))) <= build.TOLERANCE
        assert seen[-1] == (batch, 24, *aasist_net.LITE_CONFIG.grid())
    assert not np.allclose(got, got[0])  # the output depends on the input


def test_windows_and_epochs_options_reach_the_config_and_its_cache_key() -> None:
    import argparse

    from detectors import models_cli

    parser = argparse.ArgumentParser()
    models_cli.add_parser(parser.add_subparsers(dest="cmd"), "models")
    base = ["models", "train-synthetic", "--arch", "aasist-lite"]
    args = parser.parse_args([*base, "--windows", "30000", "--epochs", "3"])
    cfg = build.train_config(args.arch, args.quick, args.stage2, args.windows, args.epochs)
    assert cfg == replace(build.LITE_TRAIN, windows=30_000, epochs=3)
    args = parser.parse_args(base)
    assert build.train_config(args.arch, args.quick, args.stage2, args.windows, args.epochs) is None
    # only one of them: the other stays the architecture's (or --stage2's) own
    assert build.train_config("aasist-lite", False, None, 30_000) == replace(
        build.LITE_TRAIN, windows=30_000
    )
    assert build.train_config("cnn", False, "wide", None, 1) == replace(
        build.STAGE2["wide"], epochs=1
    )
    assert build.train_config("cnn", True, None, 64) == replace(train.QUICK, windows=64)
    keys = {
        train.stage_key(c, 1, ["espeak_en-us"])
        for c in (build.LITE_TRAIN, cfg, replace(build.LITE_TRAIN, windows=30_000))
    }
    assert len(keys) == 3  # a new budget trains anew, never reuses a cached state dict
    for bad in ((0, None), (None, 0)):
        with pytest.raises(build.BuildError, match="at least 1"):
            build.train_config("cnn", False, None, *bad)
