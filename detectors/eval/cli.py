"""``callshield eval DIR``: each installed detector's EER, false-alarm and miss rates on
your own labelled audio (``DIR/bonafide/<speaker>/*``, ``DIR/spoof/<speaker>/*``),
through the live pipeline, per condition (clean, G.711, G.711 + 5 % loss), on held-out
speakers. ``--from-manifest CSV`` lays out a corpus manifest (path, label, speaker) as
such a directory of symlinks first. See ``detectors.eval.engine`` for the rules.
This module stays cheap to import (the CLI imports it to build its parser).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ESPEAK_VOICES = ("en-us", "en-us+f3", "en+m3", "en-gb+f2", "es", "es+f4", "es-419+m2", "fr+f1")
ESPEAK_TEXT = (
    "Hello, I am calling about the recent charge on my account, can you help me please?",
    "My date of birth is the fourth of July, nineteen eighty two, and my card ends in 4 4 1.",
    "I would like to transfer two thousand dollars to my other account today, it is urgent.",
)


def add_parser(sub: Any, name: str) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="measure installed detectors on your labelled audio (EER, FA, miss)"
    )
    p.add_argument("dir", nargs="?", type=Path, help="DIR/bonafide/<speaker>/*, DIR/spoof/...")
    p.add_argument("--from-manifest", type=Path, help="lay out a corpus MANIFEST.csv instead")
    p.add_argument("--layout-dir", type=Path, help="where --from-manifest puts its symlinks")
    p.add_argument("--models-dir", type=Path, help="default: $CALLSHIELD_MODELS_DIR")
    p.add_argument(
        "--detector",
        action="append",
        help="model name (repeatable; default: all installed synthetic_voice models)",
    )
    p.add_argument("--conditions", default="clean,g711,g711_loss5")
    p.add_argument(
        "--calls",
        choices=["file", "speaker"],
        default="file",
        help="one call per file, or per speaker (its files back to back)",
    )
    p.add_argument("--aggregate", choices=["mean", "max", "median"], default="mean")
    p.add_argument("--heldout-speakers", help="test speakers: comma list or @file (one a line)")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=1.0,
        help="share of speakers (hash split) in test; the rest calibrates a threshold",
    )
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="packet-loss seed")
    p.add_argument("--policy", type=Path, help="policy JSON (default: the built-in policy)")
    p.add_argument(
        "--generate-tts",
        choices=["espeak"],
        help="add espeak-ng spoofs (generated now) to the evaluated set",
    )
    p.add_argument("--per-call", action="store_true", help="include every call's scores")
    p.add_argument(
        "--by-family",
        action="store_true",
        help="also EER per spoof family (the spoof speaker id's text before its first '_')",
    )
    p.add_argument(
        "--watchlist-sizes",
        help="instead: known_fraudster per-call false-match and hit rates per watchlist size "
        "(e.g. 10,100,1000) on a MANIFEST.csv speech folder (DIR or --from-manifest)",
    )
    p.add_argument("--target-rate", type=float, default=0.001, help="per-call false-match goal")
    p.add_argument(
        "--min-speech-s",
        type=float,
        default=6.0,
        help="--watchlist-sizes: net speech of a call when the watchlist is searched "
        "(the bridge's CALLSHIELD_BIOMETRICS_MIN_NET_SPEECH_S, default 6)",
    )
    p.add_argument(
        "--enrol-speech-s",
        type=float,
        default=3.0,
        help="--watchlist-sizes: net speech of an entry's enrolment audio "
        "(`callshield watchlist add`'s minimum, default 3)",
    )
    p.add_argument("--folds", type=int, default=10, help="random watchlist draws")
    p.add_argument("--max-speakers", type=int, help="use only the first N pool speakers")
    p.add_argument(
        "--sessions",
        action="store_true",
        help="instead: false alerts per 1,000 genuine calls and per call-hour on multi-minute "
        "one-speaker sessions per channel, and the miss rate on spoof sessions, at the policy",
    )
    p.add_argument("--minutes", type=float, default=3.0, help="session length (--sessions)")
    p.add_argument(
        "--channels",
        default="g711,gsm,opus,concealed_loss,reverb,babble",
        help="session channels (--sessions)",
    )
    p.add_argument("--max-sessions", type=int, help="at most N genuine sessions (--sessions)")
    p.add_argument(
        "--max-spoof-sessions",
        type=int,
        help="at most N spoof sessions, drawn a family at a time (--sessions)",
    )
    p.add_argument(
        "--min-unique-s",
        type=float,
        default=3.0,
        help="leave out speakers with less distinct speech (--sessions)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _speakers_arg(value: str | None) -> list[str] | None:
    if value is None:
        return None
    if value.startswith("@"):
        lines = Path(value[1:]).read_text(encoding="utf-8").splitlines()
        return [s.strip() for s in lines if s.strip()]
    return [s.strip() for s in value.split(",") if s.strip()]


def generate_espeak(out_dir: Path) -> int:
    """espeak-ng spoofs under ``out_dir/spoof/espeak_<voice>/`` (one voice = one speaker)."""
    import shutil
    import subprocess

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise ValueError("--generate-tts espeak needs espeak-ng on PATH")
    n = 0
    for voice in ESPEAK_VOICES:
        d = out_dir / "spoof" / f"espeak_{voice.replace('+', '_')}"
        d.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(ESPEAK_TEXT):
            subprocess.run(
                [exe, "-v", voice, "-w", str(d / f"{i}.wav"), text],
                check=True,
                capture_output=True,
                timeout=60,
            )
            n += 1
    return n


def run(args: argparse.Namespace) -> int:
    if args.watchlist_sizes:
        return run_watchlist(args)
    if args.sessions:
        return run_sessions(args)
    try:
        report = evaluate(args)
    except (ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else _text(report))
    return 0


def run_watchlist(args: argparse.Namespace) -> int:
    from detectors.eval.watchlist import WatchlistEvalConfig, evaluate_watchlist, format_text
    from detectors.model_store import ModelSettings, ModelStore
    from detectors.speaker.cohort import cohort_path, load_cohort
    from detectors.speaker.deriver import NAME

    try:
        sizes = tuple(int(n) for n in args.watchlist_sizes.split(",") if n.strip())
        if not sizes or min(sizes) < 1:
            raise ValueError("--watchlist-sizes: positive integers, e.g. 10,100,1000")
        speech = args.from_manifest.parent if args.from_manifest else args.dir
        if speech is None or not (speech / "MANIFEST.csv").is_file():
            raise ValueError("give a speech folder with MANIFEST.csv (DIR or --from-manifest)")
        store = ModelStore(args.models_dir or ModelSettings().models_dir)
        installed = store.get(NAME)
        path = cohort_path(store.root, installed.manifest)
        if not path.is_file():
            raise LookupError(f"no cohort at {path} (run: callshield models build-cohort DIR)")
        cohort, _, _ = load_cohort(path)
        cfg = WatchlistEvalConfig(
            sizes=sizes,
            target_rate=args.target_rate,
            min_net_speech_s=args.min_speech_s,
            enrol_net_speech_s=args.enrol_speech_s,
            folds=args.folds,
            seed=args.split_seed,
            max_speakers=args.max_speakers,
        )
        report = evaluate_watchlist(
            installed.model_path,
            installed.manifest,
            cohort,
            speech,
            cfg,
            progress=None if args.json else _progress,
        )
    except (ValueError, LookupError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_text(report))
    return 0


def run_sessions(args: argparse.Namespace) -> int:
    from detectors.eval.session_eval import format_text

    try:
        report = evaluate_sessions_cli(args)
    except (ValueError, LookupError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_text(report))
    return 0


def evaluate_sessions_cli(args: argparse.Namespace) -> dict[str, Any]:
    from detectors.eval import dataset
    from detectors.eval.channels import CHANNELS
    from detectors.eval.session_eval import SessionConfig, evaluate_sessions, plan
    from detectors.fusion import Policy
    from detectors.model_store import ModelSettings, ModelStore
    from detectors.onnx_detector import OnnxDetector

    cfg = SessionConfig(
        minutes=args.minutes,
        channels=tuple(c.strip() for c in args.channels.split(",") if c.strip()),
        max_sessions=args.max_sessions,
        max_spoof_sessions=args.max_spoof_sessions,
        min_unique_s=args.min_unique_s,
        seed=args.seed,
    )
    if cfg.minutes <= 0:
        raise ValueError("--minutes must be positive")
    with tempfile.TemporaryDirectory(prefix="callshield-sessions-") as tmp:
        if args.from_manifest is not None:
            root = args.layout_dir or Path(tmp) / "data"
            dataset.layout_from_manifest(args.from_manifest, root)
        elif args.dir is not None:
            root = args.dir
        else:
            raise ValueError("give DIR or --from-manifest CSV")
        store = ModelStore(args.models_dir or ModelSettings().models_dir)
        names = args.detector or sorted(
            {
                i.manifest.name
                for i in store.installed()
                if i.manifest.dimension.value == "synthetic_voice"
            }
        )
        if not names:
            raise LookupError(f"no synthetic_voice model installed in {store.root}")
        installed = [store.get(n) for n in names]
        excluded = {s for i in installed for s in i.manifest.training_speakers}
        items, short = plan(dataset.scan(root), excluded, cfg)
        policy = (
            Policy.model_validate_json(args.policy.read_text(encoding="utf-8"))
            if args.policy
            else Policy()
        )
        threads = max(1, (os.cpu_count() or 2))
        detectors = [
            OnnxDetector(i.manifest, i.model_path, intra_op_threads=threads) for i in installed
        ]
        rules = {}
        for i in installed:
            rule = policy.effective(i.manifest.dimension, None, i.manifest.threshold_for(None))
            own = rule.model_copy(
                update={"threshold": i.manifest.threshold_for("pcmu"), "release": None}
            )
            rules[i.manifest.name] = {"policy": rule, "model_pcmu_threshold": own}
        per = evaluate_sessions(
            detectors, rules, items, policy, cfg, progress=None if args.json else _progress
        )
        return {
            "dataset": str(args.from_manifest or root),
            "minutes": cfg.minutes,
            "seed": cfg.seed,
            "channels": {c: CHANNELS[c] for c in cfg.channels},
            "sessions": {
                "genuine": sum(it.label == "bonafide" for it in items),
                "spoof": sum(it.label == "spoof" for it in items),
                "excluded_training_speakers": len(excluded),
                "left_out_too_little_speech": sorted(short),
            },
            "policy_version": policy.version,
            "detectors": [
                {
                    "name": i.manifest.name,
                    "version": i.manifest.version,
                    "sha256": i.manifest.sha256,
                    "fixture": i.manifest.fixture,
                    "rules": per[i.manifest.name],
                }
                for i in installed
            ],
        }


def _text(report: dict[str, Any]) -> str:
    from detectors.eval.report import format_text

    return format_text(report)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    from detectors.eval import dataset
    from detectors.eval.engine import CONDITIONS, run_condition
    from detectors.eval.report import condition_report
    from detectors.fusion import Policy
    from detectors.model_store import ModelSettings, ModelStore
    from detectors.onnx_detector import OnnxDetector

    with tempfile.TemporaryDirectory(prefix="callshield-eval-") as tmp:
        root: Path
        if args.from_manifest is not None:
            root = args.layout_dir or Path(tmp) / "data"
            dataset.layout_from_manifest(args.from_manifest, root)
        elif args.dir is not None:
            root = args.dir
        else:
            raise ValueError("give DIR or --from-manifest CSV")
        if args.generate_tts == "espeak":
            if args.from_manifest is None and args.layout_dir is None:
                raise ValueError(
                    "--generate-tts writes into the data: use it with "
                    "--from-manifest, or copy your DIR first"
                )
            generate_espeak(root)
        conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
        for c in conditions:
            if c not in CONDITIONS:
                raise ValueError(f"unknown condition {c!r} (one of {', '.join(CONDITIONS)})")
        files = dataset.scan(root)
        items = dataset.by_speaker(files) if args.calls == "speaker" else files

        store = ModelStore(args.models_dir or ModelSettings().models_dir)
        if args.detector:
            installed = [store.get(n) for n in args.detector]
        else:
            names = sorted(
                {
                    i.manifest.name
                    for i in store.installed()
                    if i.manifest.dimension.value == "synthetic_voice"
                }
            )
            if not names:
                raise LookupError(f"no synthetic_voice model installed in {store.root}")
            installed = [store.get(n) for n in names]
        threads = max(1, (os.cpu_count() or 2))
        detectors = [
            OnnxDetector(i.manifest, i.model_path, intra_op_threads=threads) for i in installed
        ]
        policy = (
            Policy.model_validate_json(args.policy.read_text(encoding="utf-8"))
            if args.policy
            else Policy()
        )
        heldout = _speakers_arg(args.heldout_speakers)
        speakers = {it.speaker for it in items}
        splits = {
            i.manifest.name: dataset.make_split(
                speakers,
                heldout=heldout,
                test_fraction=args.test_fraction,
                seed=args.split_seed,
                training_speakers=i.manifest.training_speakers,
            )
            for i in installed
        }
        outcomes = {
            c: run_condition(
                c,
                detectors,
                items,
                policy=policy,
                seed=args.seed,
                progress=None if args.json else _progress,
            )
            for c in conditions
        }
        dets = []
        for inst in installed:
            m = inst.manifest
            split = splits[m.name]
            pol_thr = policy.effective(m.dimension, None, m.threshold_for(None)).threshold
            per_cond = {
                c: condition_report(
                    items,
                    outcomes[c][m.name],
                    split,
                    aggregate=args.aggregate,
                    threshold=m.threshold_for(None if c == "clean" else "pcmu"),
                    policy_threshold=pol_thr,
                    by_family=args.by_family,
                )
                for c in conditions
            }
            entry: dict[str, Any] = {
                "name": m.name,
                "version": m.version,
                "dimension": m.dimension.value,
                "fixture": m.fixture,
                "sample_rate": m.input.sample_rate,
                "window_s": m.input.window / m.input.sample_rate,
                "hop_s": m.input.hop / m.input.sample_rate,
                "min_net_speech_s": m.min_net_speech_s,
                "excluded_training_speakers": len(split.excluded),
                "test_speakers": len(split.test),
                "calib_speakers": len(split.calib),
                "conditions": per_cond,
            }
            if args.per_call:
                entry["calls"] = {
                    c: {
                        it.call_id: {
                            "label": it.label,
                            "speaker": it.speaker,
                            "part": split.part(it.speaker),
                            "score": outcomes[c][m.name][it.call_id].score(args.aggregate),
                            "windows": [
                                round(s, 5)
                                for _, s in sorted(outcomes[c][m.name][it.call_id].scores)
                            ],
                            "alerted": outcomes[c][m.name][it.call_id].alerted,
                        }
                        for it in items
                    }
                    for c in conditions
                }
            dets.append(entry)
        return {
            "dataset": {
                "dir": str(args.from_manifest or root),
                "calls": len(items),
                "files": len(files),
                "speakers": len(speakers),
            },
            "unit": args.calls,
            "aggregate": args.aggregate,
            "conditions": {c: CONDITIONS[c] for c in conditions},
            "split": {
                "heldout_speakers": heldout is not None,
                "test_fraction": args.test_fraction,
                "seed": args.split_seed,
            },
            "policy_version": policy.version,
            "detectors": dets,
        }


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
