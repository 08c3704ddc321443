"""A leg's configuration: one payload-type model for the jitter buffer and the ingest,
and a fresh DTMF key per leg (tokens must not be comparable across calls)."""

from __future__ import annotations

import pytest

from native.ingest_types import LegConfig
from native.jitter import CODEC_IDS, PayloadType


def test_every_leg_gets_its_own_dtmf_key() -> None:
    keys = {int(LegConfig().jb_config().dtmf_key) for _ in range(20)}
    assert len(keys) == 20


def test_leg_settings_reach_the_c_config() -> None:
    cfg = LegConfig(
        payload_types=(PayloadType(0, "PCMU"), PayloadType(96, "L16", 8000, 2)),
        min_delay_ms=0,
        max_delay_ms=250,
    ).jb_config()
    assert (cfg.min_delay_ms, cfg.max_delay_ms, cfg.start_delay_ms) == (0, 250, 80)
    assert cfg.n_pts == 2
    assert (cfg.pts[1].pt, cfg.pts[1].codec, cfg.pts[1].channels) == (96, CODEC_IDS["L16"], 2)


def test_unknown_codec_is_refused_where_the_table_is_built() -> None:
    with pytest.raises(ValueError, match="unknown codec 'G729'"):
        PayloadType(18, "G729")
