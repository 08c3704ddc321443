"""``callshield eval --sessions``: the session builder (one speaker, pauses, repeats,
exact length, seeded), babble at a given SNR, per-call alert counting, the exact bounds,
and the command end to end on real speech through every channel with the tiny fixture
model under a policy that alerts on every call."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.alert_schema import Dimension
from detectors.bus.policy import DimensionPolicy
from detectors.eval import sessions
from detectors.eval.channels import CHANNELS
from detectors.eval.dataset import Item
from detectors.eval.engine import CallOutcome
from detectors.eval.session_eval import clopper_pearson, count_alerts, poisson_upper, tally
from detectors.fusion import Policy
from detectors.manifest import ModelManifest
from detectors.model_store import ModelStore
from sip_bridge.cli import main

Built = tuple[bytes, ModelManifest]


@pytest.fixture(scope="module")
def prompts(shared_dir: Path) -> list[Path]:
    files = sorted((shared_dir / "data/speech/asterisk_prompts/en").glob("*.wav"))
    assert len(files) >= 8, "the shared corpus lacks the Asterisk prompts"
    return files


def test_session_is_one_speaker_with_pauses_and_repeats(prompts: list[Path]) -> None:
    files = prompts[:2]
    a = sessions.render(files, 30.0, seed=1)
    assert a.audio.shape == (30 * sessions.RATE,) and a.audio.dtype == np.float32
    unique = sum(len(sessions._utterance(f)) for f in files) / sessions.RATE
    assert a.unique_s == pytest.approx(unique)
    # two short prompts cannot fill 30 s once: they recur, and the count says so
    assert a.speech_s > a.unique_s and a.passes == pytest.approx(a.speech_s / a.unique_s)
    assert a.speech_s < 30.0  # pauses take the rest
    unit = sessions.RATE // 400
    power = np.mean(a.audio[: len(a.audio) // unit * unit].reshape(-1, unit) ** 2, axis=1)
    silent = np.mean(power <= sessions.SPEECH_GATE)
    assert 0.1 < silent < 0.9
    assert np.array_equal(a.audio, sessions.render(files, 30.0, seed=1).audio)
    assert not np.array_equal(a.audio, sessions.render(files, 30.0, seed=2).audio)
    with pytest.raises(ValueError):
        sessions.render([], 5.0, seed=0)


def test_babble_is_mixed_at_the_asked_snr(prompts: list[Path]) -> None:
    speech = sessions.render(prompts[:3], 20.0, seed=3).audio
    noise = sessions.babble([prompts[3:5], prompts[5:7], prompts[7:8]], 20.0, seed=4)
    mixed = sessions.mix_at_snr(speech, noise, 10.0)
    added = (mixed - speech).astype(np.float64)
    snr = 10 * math.log10(sessions.active_power(speech) / np.mean(added**2))
    assert snr == pytest.approx(10.0, abs=0.3)


def test_alerts_counted_per_call_in_time_order() -> None:
    rule = DimensionPolicy(threshold=0.5, n=2, m=3, max_alerts_per_call=3)
    # two episodes: an opening pair, a full release window, a second pair
    seq = [0.9, 0.8, 0.1, 0.1, 0.1, 0.7, 0.6, 0.1]
    o = CallOutcome(scores=[(1.5 * i, s) for i, s in enumerate(seq)][::-1])  # any order
    assert count_alerts(o, rule) == 2
    assert count_alerts(o, rule.model_copy(update={"max_alerts_per_call": 1})) == 1
    assert count_alerts(CallOutcome(), rule) == 0


def test_tally_sums_calls_and_finds_the_zero_false_alert_threshold() -> None:
    rule = DimensionPolicy(threshold=0.5, n=2, m=3)
    items = [
        Item("g1", "bonafide", "a", ()),
        Item("g2", "bonafide", "b", ()),
        Item("s1", "spoof", "x_1", ()),
        Item("s2", "spoof", "x_2", ()),
    ]

    def call(*scores: float) -> CallOutcome:
        return CallOutcome(scores=[(1.5 * i, s) for i, s in enumerate(scores)])

    outcomes = {
        "g1": call(0.6, 0.6, 0.1),  # one false alert; alerts up to threshold 0.6
        "g2": call(0.2, 0.3, 0.2),
        "s1": call(0.9, 0.95, 0.9),
        "s2": call(0.55, 0.58, 0.1),  # caught at 0.5, not above 0.6
    }
    r = tally(items, outcomes, rule, minutes=6.0)
    assert r["genuine_calls"] == 2 and r["call_hours"] == pytest.approx(0.2)
    assert r["false_alerts"] == 1 and r["genuine_calls_alerted"] == 1
    assert r["false_alerts_per_1000_calls"] == 500.0
    assert r["false_alerts_per_call_hour"] == pytest.approx(5.0)
    assert r["spoof_missed"] == 0 and r["miss_rate"] == 0.0
    assert r["genuine_max_alert_score"] == pytest.approx(0.6)
    assert r["miss_rate_above_it"] == 0.5
    assert r["per_call"] == {"g1": 1, "s1": 1, "s2": 1}


def test_exact_bounds() -> None:
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-6)
    lo, hi = clopper_pearson(5, 10)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(0.812914, abs=1e-5)
    assert poisson_upper(0) == pytest.approx(-math.log(0.025), abs=1e-6)
    assert poisson_upper(3) == pytest.approx(8.767273, abs=1e-5)
    # large counts stay finite (many alerts on a long run): near k + 1.96 sqrt(k)
    assert 540.0 < poisson_upper(500) < 550.0
    lo, hi = clopper_pearson(500, 5000)
    assert 0.0915 < lo < 0.092 and 0.1085 < hi < 0.1090


def test_sessions_command_counts_alerts_per_channel(
    prompts: list[Path],
    shared_dir: Path,
    tmp_path: Path,
    tiny_aasist: Built,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "data"
    gemini = sorted((shared_dir / "data/speech/gemini_tts_es_mx").rglob("*.wav"))[:2]
    layout = {
        "bonafide/allison": prompts[:3],
        "bonafide/trained_on": prompts[3:5],
        "bonafide/too_short": prompts[5:6],
        "bonafide/other": [sorted((shared_dir / "data/speech/osr").glob("*.wav"))[0]],
        "spoof/gemini_a": gemini[:1],
        "spoof/gemini_b": gemini[1:],
    }
    for sub, files in layout.items():
        (root / sub).mkdir(parents=True)
        for f in files:
            (root / sub / f.name).symlink_to(f)
    data, manifest = tiny_aasist
    manifest = manifest.model_copy(update={"training_speakers": ("trained_on",)})
    ModelStore(tmp_path / "m").add_built(data, manifest)
    # threshold 0: every call with two scored windows alerts once (release never comes)
    policy = tmp_path / "policy.json"
    rule = DimensionPolicy(threshold=0.0)  # named: an unnamed one runs at the model threshold
    policy.write_text(Policy(dimensions={Dimension.SYNTHETIC_VOICE: rule}).model_dump_json())
    short = sessions.render(prompts[5:6], 1.0, 0).unique_s
    argv = ["eval", str(root), "--sessions", "--models-dir", str(tmp_path / "m")]
    argv += ["--minutes", "0.25", "--min-unique-s", str(short + 0.01), "--json"]
    assert main([*argv, "--policy", str(policy), "--channels", ",".join(CHANNELS)]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert report["sessions"]["genuine"] == 2 and report["sessions"]["spoof"] == 2
    assert report["sessions"]["left_out_too_little_speech"] == ["too_short"]
    [det] = report["detectors"]
    per = det["rules"]["policy"]
    assert set(per) == set(CHANNELS)
    for ch, r in per.items():
        assert r["genuine_calls"] == 2 and r["call_hours"] == pytest.approx(2 * 0.25 / 60), ch
        assert r["false_alerts"] == 2 and r["genuine_calls_alerted"] == 2, ch
        assert r["false_alerts_per_1000_calls"] == 1000.0
        assert r["false_alerts_per_call_hour"] == pytest.approx(2 / (0.5 / 60))
        assert r["spoof_missed"] == 0 and r["miss_rate"] == 0.0
        # the replayed policy and fusion itself agree on which calls alerted
        assert r["fusion_alerted_calls"] == r["policy_sim_alerted_calls"] == 4
    # the shipped policy (threshold 0.5): the fixture scores real speech far below it
    assert main([*argv, "--channels", "g711"]) == 0
    quiet = json.loads(capsys.readouterr().out)["detectors"][0]["rules"]["policy"]["g711"]
    assert quiet["false_alerts"] == 0 and quiet["miss_rate"] == 1.0
    assert quiet["calls_alerted_per_1000_upper95"] == pytest.approx(1000 * (1 - 0.025**0.5))
