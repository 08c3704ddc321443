"""``train-synthetic --restarts K``: restarts 0 .. K-1 of the recipe, each scored on dev,
the one with the lowest dev µ-law EER installed (restarts.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from detectors.synthetic import restarts, train
from detectors.synthetic.train import TrainConfig


def _dev(pcmu: float | None, pcma: float = 0.0) -> dict[str, Any]:
    return {"pcmu": {"eer": pcmu}, "pcma": {"eer": pcma}}


def test_the_pick_is_the_lowest_dev_mulaw_eer_and_the_lower_restart_on_a_tie() -> None:
    # pcma is lower at restart 0: only µ-law counts
    assert restarts.pick([_dev(0.095, pcma=0.01), _dev(0.063), _dev(0.095)]) == 1
    assert restarts.pick([_dev(0.05), _dev(0.05)]) == 0
    assert restarts.pick([_dev(0.2), _dev(0.1), _dev(0.1)]) == 1
    assert restarts.pick([_dev(None), _dev(0.4)]) == 1  # no EER is never the best
    assert restarts.pick([_dev(None), _dev(None)]) == 0
    with pytest.raises(ValueError):
        restarts.pick([])


def test_the_provenance_names_the_pick_and_every_restart_figure() -> None:
    text = restarts.provenance(1, [_dev(0.095), _dev(0.063), _dev(None)])
    assert "restart 1 of restarts 0-2" in text
    assert "0: 9.5%, 1: 6.3%, 2: -" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--restarts", "1"), "--restarts takes 2 or more"),
        (("--restarts", "2", "--restart", "1"), "does not take --restart"),
        (("--restarts", "2", "--distil", "2"), "does not take --distil"),
        (("--restarts", "2", "--lofo"), "--lofo does not take"),
    ],
)
def test_restarts_combinations_are_refused_before_the_draw(
    refused: Callable[..., str], extra: tuple[str, ...], message: str
) -> None:
    assert message in refused(*extra)


def test_restarts_install_the_one_best_on_dev_the_very_network_of_its_restart_build(
    quick_cnn_argv: Callable[..., list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from detectors.model_store import ModelStore
    from detectors.synthetic import build
    from sip_bridge.cli import main

    real_train, real_dev = train.train, build.dev_report
    seen: list[tuple[int, bool]] = []

    def record(windows: Any, labels: Any, cfg: TrainConfig, seed: int, *a: Any, **k: Any) -> Any:
        seen.append((cfg.restart, k.get("init") is not None))
        return real_train(windows, labels, cfg, seed, *a, **k)

    scored: list[float] = []

    def dev_report(session: Any, *a: Any) -> Any:
        # quick builds often tie on dev: restart 0's µ-law EER is made worse by a full
        # point, so the pick must be restart 1 and every other figure stays its own
        report, thresholds = real_dev(session, *a)
        if not scored:
            report["pcmu"]["eer"] += 1.0
        scored.append(report["pcmu"]["eer"])
        return report, thresholds

    monkeypatch.setattr(train, "train", record)
    monkeypatch.setattr(build, "dev_report", dev_report)
    work = tmp_path / "work"  # its own cache: every stage trains here
    argv = quick_cnn_argv(tmp_path / "picked", "--restarts", "2")
    argv[argv.index("--work") + 1] = str(work)
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # each restart: stage 1, then the quick recipe's stage 2 from it
    assert seen == [(0, False), (0, True), (1, False), (1, True)]
    assert len(scored) == 2 and scored[0] > scored[1]
    (picked,) = ModelStore(tmp_path / "picked").installed()
    assert picked.manifest.version.endswith("+s0.r1of2")
    assert "restart 1 of restarts 0-1, picked as the lowest dev µ-law EER" in (
        picked.manifest.provenance
    )
    rows = [line.strip() for line in printed.splitlines() if line.strip().startswith("restart ")]
    assert [r.split(":")[0] for r in rows] == ["restart 0", "restart 1"]
    assert "<- installed" not in rows[0] and rows[1].endswith("<- installed (its dev above)")
    report = json.loads((work / "report-s0-quick-k2.json").read_text())
    assert report["restarts"]["picked"] == 1 == report["config"]["restart"]
    assert [r["dev"]["pcmu"]["eer"] for r in report["restarts"]["dev"]] == scored
    assert report["dev"]["pcmu"]["eer"] == scored[1]  # the installed network's own figures

    # the installed network is restart 1's, as a --restart 1 build installs it (from the
    # cache: nothing trains again), thresholds and all
    seen.clear()
    scored.clear()
    argv = quick_cnn_argv(tmp_path / "restart1", "--restart", "1")
    argv[argv.index("--work") + 1] = str(work)
    assert main(argv) == 0
    assert seen == []
    (single,) = ModelStore(tmp_path / "restart1").installed()
    assert single.manifest.version.endswith("+s0.r1")
    assert single.manifest.sha256 == picked.manifest.sha256
    assert single.manifest.thresholds == picked.manifest.thresholds
    again = json.loads((work / "report-s0-quick-r1.json").read_text())
    assert again["trained_on"] == report["trained_on"]  # the same clips and windows
