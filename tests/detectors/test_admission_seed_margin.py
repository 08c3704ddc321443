"""Admission's seed margin is an operator setting (issue 5): the pre-warm's full-pool
cost per window times the margin seeds the capacity estimate, a different margin
changes the seeded capacity by exactly that factor, and a bad value is refused with an
error naming the setting and its range (in the bridge's settings: the environment and
the config file) instead of being clamped silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from detectors.admission import Admission, AdmissionConfig, OverloadPolicy
from detectors.prewarm_cost import PrewarmCosts
from sip_bridge.settings import Settings

# the 2-core box's 8 kHz AASIST: 24 ms per window alone, 42 ms with the pool full
COSTS = PrewarmCosts(
    workers=2,
    alone={"aasist": {1: 0.024, 2: 0.024, 4: 0.025, 8: 0.026}},
    loaded={"aasist": 0.042},
)
DEMAND = {"aasist": 0.76}  # windows per call-second


def _seeded(margin: float) -> Admission:
    adm = Admission(
        AdmissionConfig(
            policy=OverloadPolicy.REFUSE, workers=2, utilisation=0.8, seed_margin=margin
        ),
        DEMAND,
        concurrency={"aasist": 2},
    )
    adm.seed(COSTS)
    return adm


@pytest.mark.parametrize(
    ("margin", "capacity"),
    [(1.0, 50), (1.2, 41), (1.5, 33), (2.0, 25)],  # int(2 x 0.8 / (0.76 x 0.042 x margin))
)
def test_the_margin_divides_the_seeded_capacity(margin: float, capacity: int) -> None:
    adm = _seeded(margin)
    assert adm.seeded_capacity() == adm.capacity() == capacity
    seeded = adm.snapshot()["seeded"]
    assert isinstance(seeded, dict) and seeded["margin"] == margin
    assert seeded["loaded_cost_per_window_s"] == {"aasist": 0.042}  # as timed
    assert adm.snapshot()["cost_per_window_s"] == {"aasist": pytest.approx(0.042 * margin)}
    decisions = [adm.admit(f"c{i}") for i in range(capacity + 3)]
    assert sum(d.analysed for d in decisions) == capacity  # the burst beyond is refused


@pytest.mark.parametrize("bad", [0.9, 0.0, -1.2, 4.5, 12.0, float("nan"), float("inf")])
def test_a_bad_margin_is_refused_not_clamped(bad: float) -> None:
    with pytest.raises(ValueError, match=r"seed margin .* is outside 1\.0-4\.0"):
        AdmissionConfig(seed_margin=bad)
    with pytest.raises(ValidationError, match="admission_seed_margin"):
        Settings(admission_seed_margin=bad)


def test_the_bridge_reads_the_margin_from_environment_and_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings().admission_seed_margin == 1.2  # the default, as before
    config = tmp_path / "callshield.toml"
    config.write_text("[bridge]\nadmission_seed_margin = 1.5\n")
    assert Settings.load(config).admission_seed_margin == 1.5
    monkeypatch.setenv("CALLSHIELD_ADMISSION_SEED_MARGIN", "2.0")
    assert Settings.load(config).admission_seed_margin == 2.0  # environment beats the file
    monkeypatch.setenv("CALLSHIELD_ADMISSION_SEED_MARGIN", "0.8")
    with pytest.raises(ValidationError, match=r"admission_seed_margin[\s\S]*seed margin 0.8"):
        Settings.load(config)
    monkeypatch.setenv("CALLSHIELD_ADMISSION_SEED_MARGIN", "1,2")
    with pytest.raises(ValidationError, match="admission_seed_margin"):
        Settings.load(config)
