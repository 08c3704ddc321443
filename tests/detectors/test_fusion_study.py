"""detectors.eval.fusion_study: two models' per-call window scores (``callshield eval
--per-call --json``) fused per window, the weight and thresholds chosen on dev only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.eval import fusion_study as fs
from detectors.eval.metrics import eer
from detectors.synthetic.build import threshold_rule


def _report(path: Path, models: dict[str, dict[str, dict[str, Any]]]) -> Path:
    """An eval report: model -> condition -> call id -> (label, speaker, windows)."""
    dets = []
    for name, conds in models.items():
        calls = {
            cond: {
                cid: {
                    "label": label,
                    "speaker": spk,
                    "part": "test",
                    "score": float(np.mean(w)) if w else None,
                    "windows": list(w),
                    "alerted": False,
                }
                for cid, (label, spk, w) in calls.items()
            }
            for cond, calls in conds.items()
        }
        dets.append({"name": name, "calls": calls})
    path.write_text(json.dumps({"detectors": dets}), encoding="utf-8")
    return path


def _calls(seed: int, good: bool, n: int = 40) -> dict[str, tuple[str, str, list[float]]]:
    """n genuine and n spoof calls of 1-3 windows; ``good`` separates them, else noise.
    The same seed gives the same calls and window counts whatever ``good`` is."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(2 * n):
        label = "bonafide" if i < n else "spoof"
        k = int(rng.integers(1, 4))
        u = rng.uniform(0.0, 1.0, k)
        lo, span = (0.05 if label == "bonafide" else 0.55, 0.4) if good else (0.05, 0.9)
        w = lo + span * u
        spk = f"spk{i % 7}" if label == "bonafide" else ("gemini_x" if i % 2 else "lpc_y")
        out[f"{label}/{spk}/{i}.wav"] = (label, spk, [round(float(x), 5) for x in w])
    return out


def test_fuse_rules() -> None:
    a, b = np.array([0.9, 0.2]), np.array([0.5, 0.6])
    np.testing.assert_allclose(fs.fuse(a, b, "a", 0.5), a)
    np.testing.assert_allclose(fs.fuse(a, b, "b", 0.5), b)
    np.testing.assert_allclose(fs.fuse(a, b, "prob", 0.25), 0.25 * a + 0.75 * b)
    z = 0.5 * np.log(a / (1 - a)) + 0.5 * np.log(b / (1 - b))
    np.testing.assert_allclose(fs.fuse(a, b, "logit", 0.5), 1 / (1 + np.exp(-z)))
    # saturated probabilities stay finite
    assert np.all(np.isfinite(fs.fuse(np.array([1.0, 0.0]), np.array([1.0, 0.0]), "logit", 0.5)))
    x = np.array([0.99, 0.5, 0.5])
    assert fs.POOL["mean"](x) == pytest.approx(np.mean(x))
    z = np.mean(np.log(x / (1 - x)))
    assert fs.POOL["logit-mean"](x) == pytest.approx(1 / (1 + np.exp(-z)))
    with pytest.raises(ValueError, match="unknown rule"):
        fs.fuse(a, b, "max", 0.5)


def test_single_model_rule_reproduces_the_eval_eer(tmp_path: Path) -> None:
    calls = _calls(1, good=False)
    rep = fs.load_reports([_report(tmp_path / "r.json", {"A": {"g711": calls}})])
    a = rep[0][("A", "g711")]
    s = fs.score_pairs(a, a, "a", 0.5)
    bona = [float(np.mean(w)) for lab, _, w in calls.values() if lab == "bonafide"]
    spoof = [float(np.mean(w)) for lab, _, w in calls.values() if lab == "spoof"]
    ref = eer(bona, spoof)
    assert ref is not None and fs.eer_of(s) == pytest.approx(ref.eer)


def test_weight_goes_to_the_model_that_separates_dev(tmp_path: Path) -> None:
    a, b = _calls(2, good=True), _calls(2, good=False)
    rep = fs.load_reports([_report(tmp_path / "r.json", {"A": {"g711": a}, "B": {"g711": b}})])
    wa = fs.choose_weight(rep[0][("A", "g711")], rep[0][("B", "g711")], "logit-dev")
    assert wa >= 0.5
    assert fs.eer_of(fs.score_pairs(rep[0][("A", "g711")], rep[0][("B", "g711")], "a", wa)) == 0.0


def test_study_thresholds_come_from_dev_and_are_applied_to_test(tmp_path: Path) -> None:
    dev = _report(
        tmp_path / "dev.json",
        {
            "A": {"g711": _calls(3, True), "clean": _calls(4, True)},
            "B": {"g711": _calls(3, False), "clean": _calls(4, False)},
        },
    )
    test = _report(
        tmp_path / "test.json",
        {
            "A": {"g711": _calls(5, True), "clean": _calls(6, True)},
            "B": {"g711": _calls(5, False), "clean": _calls(6, False)},
        },
    )
    out = fs.study([dev], [test], "A", "B")
    a_only = out["rules"]["a"]
    dev_bona = [w for lab, _, ws in _calls(3, True).values() if lab == "bonafide" for w in ws]
    dev_calls = [float(np.mean(ws)) for lab, _, ws in _calls(3, True).values() if lab == "bonafide"]
    thr = threshold_rule(dev_calls, dev_bona)["threshold"]
    assert a_only["dev"]["g711"]["threshold"] == pytest.approx(thr, abs=1e-6)
    assert a_only["test"]["g711"]["threshold"] == pytest.approx(thr, abs=1e-6)
    strictest = max(a_only["dev"][c]["threshold"] for c in ("g711", "clean"))
    assert a_only["test"]["clean"]["threshold"] == pytest.approx(strictest)
    assert a_only["test"]["g711"]["eer"] == 0.0
    assert set(a_only["test"]["g711"]["by_family"]) == {"gemini", "lpc"}
    assert out["rules"]["b"]["test"]["g711"]["eer"] > 0.2
    assert out["rules"]["logit-dev"]["weight_a"] >= 0.5
    assert out["rules"]["logit"]["weight_a"] == 0.5
    table = fs.format_table(out)
    assert table.count("\n") == 2 + len(fs.RULES) * 4 - 1 and "gemini" in table


def test_mismatched_windows_are_left_out_and_counted(tmp_path: Path) -> None:
    a = _calls(7, True)
    b = dict(_calls(7, False))
    cid = next(iter(b))
    label, spk, w = b[cid]
    b[cid] = (label, spk, [*w, 0.5])
    rep = fs.load_reports([_report(tmp_path / "r.json", {"A": {"g711": a}, "B": {"g711": b}})])
    s = fs.score_pairs(rep[0][("A", "g711")], rep[0][("B", "g711")], "logit", 0.5)
    assert s.mismatched == 1 and cid not in s.calls and len(s.calls) == len(a) - 1


def test_cli_and_missing_per_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dev = _report(tmp_path / "dev.json", {"A": {"g711": _calls(8, True)}})
    test = _report(tmp_path / "test.json", {"A": {"g711": _calls(9, True)}})
    other = _report(tmp_path / "other.json", {"B": {"g711": _calls(8, False)}})
    other_t = _report(tmp_path / "other_t.json", {"B": {"g711": _calls(9, False)}})
    argv = ["--dev", str(dev), "--dev", str(other), "--test", str(test), "--test", str(other_t)]
    assert fs.main([*argv, "--a", "A", "--b", "B", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["rules"]["a"]["test"]["g711"]["eer"] == 0.0
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"detectors": [{"name": "A"}]}), encoding="utf-8")
    assert fs.main(["--dev", str(bare), "--test", str(test), "--a", "A", "--b", "B"]) == 1
    assert "--per-call" in capsys.readouterr().err
