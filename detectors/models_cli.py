"""``callshield models list | verify | install | build-fixtures | import-aasist |
derive-speaker | train-synthetic | fuse-synthetic | install-vad | eval-speaker``: the models
directory.

Nothing is downloaded: ``install`` copies a local ONNX file and its manifest (checked by
sha256); ``build-fixtures`` (a dev command, needs the ``onnx`` package) builds the
runtime test fixtures of ``detectors.fixture_models`` into the directory.
This module stays cheap to import (the CLI imports it to build its parser).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# train-synthetic's default recipe (since 2026-12-02, the rule set before its measurement
# in docs/models/synthetic_voice.md, "AASIST-lite with Kokoro"): AASIST-lite trained with
# the Kokoro voices; `--arch cnn --with-family none` is the recipe before it
DEFAULT_ARCH = "aasist-lite"
DEFAULT_FAMILIES = ("kokoro",)


def training_families(chosen: list[str] | None) -> tuple[str, ...]:
    """--with-family as given: the default recipe's families when absent, none for
    'none' (alone: it cannot be mixed with a family)."""
    if chosen is None:
        return DEFAULT_FAMILIES
    if "none" in chosen:
        if len(set(chosen)) > 1:
            raise ValueError("--with-family none cannot be combined with a family")
        return ()
    return tuple(dict.fromkeys(chosen))


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="list, verify and install detector models (ONNX + manifest)"
    )
    parser.add_argument(
        "--models-dir", type=Path, help="models directory (default: $CALLSHIELD_MODELS_DIR)"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    p = verbs.add_parser("list", help="installed models and their manifests")
    p.add_argument("--json", action="store_true")
    verbs.add_parser("verify", help="check every model file against its manifest's sha256")
    p = verbs.add_parser("install", help="copy a local model (and its manifest) into the directory")
    p.add_argument("source", type=Path, help="the .onnx file")
    p.add_argument("--manifest", type=Path, help="its manifest (default: the one beside it)")
    p = verbs.add_parser(
        "build-fixtures", help="dev: build the runtime test fixtures (not detectors)"
    )
    p.add_argument("--tiny", action="store_true", help="small variants, for tests")
    p = verbs.add_parser(
        "import-aasist",
        help="convert an official AASIST / AASIST-L checkpoint to ONNX (needs the convert extra)",
    )
    p.add_argument("checkpoint", type=Path, help="the authors' .pth state dict (your own copy)")
    p.add_argument("--variant", choices=["AASIST", "AASIST-L"], help="default: from the weights")
    p.add_argument("--out", type=Path, help="output directory (default: the models directory)")
    p = verbs.add_parser(
        "derive-speaker",
        help="derive the speaker-embedding ONNX from the resemblyzer wheel (convert extra)",
    )
    p.add_argument("--weights", type=Path, help="default: resemblyzer/pretrained.pt, installed")
    p.add_argument("--window-s", type=float, default=3.0)
    p.add_argument("--hop-s", type=float, default=1.5)
    p.add_argument("--reference-audio", type=Path, nargs="*", help="real speech WAVs to verify on")
    p.add_argument("--out", type=Path, help="output directory (default: the models directory)")
    p.add_argument(
        "--cohort-from",
        type=Path,
        metavar="SPEECH_DIR",
        help="then build the S-norm impostor cohort from this MANIFEST.csv folder",
    )
    p = verbs.add_parser(
        "build-cohort",
        help="the speaker model's S-norm impostor cohort from a speech folder (MANIFEST.csv)",
    )
    p.add_argument("speech_dir", type=Path)
    p.add_argument("--datasets", default="speechocean762")
    p.add_argument("--fraction", type=float, default=0.25, help="share of speakers (hash)")
    p.add_argument(
        "--top-k",
        type=int,
        default=200,
        help="adaptive S-norm: each score normalised by its K closest cohort members",
    )
    p = verbs.add_parser(
        "train-synthetic",
        help="train CallShield's own 8 kHz synthetic_voice model from the shared corpus "
        "(convert extra; CPU: about an hour on 2 cores for the default recipe)",
    )
    p.add_argument("--out", type=Path, help="output directory (default: the models directory)")
    p.add_argument("--work", type=Path, help="generated spoofs, test split, report (a cache)")
    p.add_argument("--speech-dir", type=Path, help="default: $CALLSHIELD_SHARED/data/speech")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a tiny build, for tests")
    p.add_argument(
        "--hold-out-family",
        metavar="NAME",
        help="keep this spoof family (espeak, flite, festival, piper, world, griffinlim, lpc) "
        "out of training and dev and report its EER; everything goes to WORK/lofo-NAME/, "
        "never over the installed model",
    )
    p.add_argument(
        "--lofo",
        action="store_true",
        help="leave-one-spoof-family-out: one build per family held out, then the EER table "
        "(a full training each; with --quick the small test budget)",
    )
    p.add_argument(
        "--stage2",
        choices=["wide", "narrow"],
        help="continue training on 8,000 fresh windows for 2 epochs, through the wide channel "
        "(reverb, GSM / Opus upstream) or the stage-1 one; off by default because it made "
        "unseen generators worse (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--codec-aug",
        action="store_true",
        help="pass 35 %% of training windows of both classes through MP3 / AAC / Opus first, "
        "so compressed genuine audio is not read as synthetic (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--rawboost",
        action="store_true",
        help="pass half of the training windows of both classes through random notch "
        "filters, a nonlinearity and impulsive noise first (RawBoost-style); measured at two "
        "seeds: a little better on never-trained generators, worse overall "
        "(docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="train each resynthesis spoof (WORLD, Griffin-Lim) beside a window of its own "
        "source file, same offset, same channel, same batch, so only the vocoder's "
        "artefacts tell them apart; measured twice at two seeds against the default: within "
        "its build-to-build spread, dev worse in the second run, so not the default "
        "(docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--restart",
        type=int,
        default=0,
        metavar="N",
        help="train from other initial weights and batch order (N > 0), on the same split, "
        "spoofs and windows as the seed's build: builds that differ in nothing else show how "
        "far training alone spreads a recipe's figures (docs/models/synthetic_voice.md); "
        "the model's version gets .rN",
    )
    p.add_argument(
        "--distil",
        type=int,
        default=0,
        metavar="K",
        help="train one network towards its label mixed with the mean of K restarts of this "
        "recipe (--restart 0 .. K-1, reused from the work directory or trained first), on "
        "the same windows, for an ensemble's steadiness at one network's run-time cost; K + 1 "
        "trainings when nothing is cached; version .dK. Measured at K=2 it was worse on dev "
        "than the two restarts' mean at both seeds (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--restarts",
        type=int,
        default=0,
        metavar="K",
        help="train restarts 0 .. K-1 of this recipe (each reused from the work directory "
        "where a --restart N build left it, so they can run in parallel first) and install "
        "the one with the lowest dev µ-law EER; K trainings, one network at run time; "
        "version .rNofK. Over three restarts at two seeds the pick beat the restarts' mean "
        "on test (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--loss",
        choices=["bce", "ocsoftmax"],
        default="bce",
        help="the training loss: binary cross-entropy (default), or a one-class softmax "
        "that learns a compact bona fide region, meant for generators absent from training; "
        "measured at two seeds: worse, on those generators too (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--with-family",
        action="append",
        default=None,
        choices=["kokoro", "kokoro-blends", "neuralvoc", "none"],
        help="the opt-in spoof families to train on (default: kokoro, the Kokoro-82M voices; "
        "kokoro-blends: four more Kokoro timbres, blends of its training styles; "
        "neuralvoc: training speakers' files resynthesised by a small GAN vocoder the build "
        "trains on the speakers pinned to train (measured: worse at two seeds); "
        "'none': without them, the recipe before 2026-12-02); their dev and test voices are "
        "always generated (docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--with-bonafide",
        action="append",
        choices=["debian-ivr"],
        help="more bona fide speakers, pinned to train: debian-ivr, the French and Italian "
        "IVR voices of Debian's Asterisk prompt packages (three people, 32 files each; "
        "docs/models/synthetic_voice.md)",
    )
    p.add_argument(
        "--arch",
        choices=["cnn", "aasist", "cnn-phase", "aasist-lite"],
        default=DEFAULT_ARCH,
        help="aasist-lite (the default since 2026-12-02): AASIST on the raw 8 kHz waveform at "
        "a third of its cost (callshield-aasist-lite-8k, ~7 ms of CPU per window); cnn: the "
        "log-spectrogram CNN (callshield-synthetic-8k, the default before); aasist: the full "
        "8 kHz AASIST (callshield-aasist-8k, opt-in, ~24 ms per window); cnn-phase: the CNN "
        "with phase-derivative input channels (callshield-synthetic-phase-8k, opt-in); "
        "docs/models/synthetic_voice.md",
    )
    p.add_argument(
        "--windows",
        type=int,
        metavar="N",
        help="training windows drawn (default: the architecture's budget, e.g. 8,000)",
    )
    p.add_argument(
        "--epochs", type=int, metavar="E", help="epochs over them (default: the architecture's)"
    )
    p = verbs.add_parser(
        "fuse-synthetic",
        help="two synthetic_voice models as one (one ONNX graph, the mean of their logits), "
        "thresholds from the seed's dev part (onnx package; docs/models/synthetic_voice.md)",
    )
    p.add_argument("--a", nargs=2, metavar=("DIR", "NAME"), required=True, help="first model")
    p.add_argument("--b", nargs=2, metavar=("DIR", "NAME"), required=True, help="second model")
    p.add_argument(
        "--weight", type=float, default=0.5, help="the first model's logit weight (0..1)"
    )
    p.add_argument("--seed", type=int, default=0, help="the split both models were built on")
    p.add_argument("--work", type=Path, help="the builds' work directory (dev spoofs, a cache)")
    p.add_argument("--speech-dir", type=Path, help="default: $CALLSHIELD_SHARED/data/speech")
    p.add_argument("--quick", action="store_true", help="the quick split, for tests")
    p.add_argument("--out", type=Path, help="output directory (default: the models directory)")
    p = verbs.add_parser(
        "install-vad", help="copy Silero VAD's ONNX out of the silero-vad wheel (convert extra)"
    )
    p.add_argument("--out", type=Path, help="output directory (default: the models directory)")
    p = verbs.add_parser(
        "eval-speaker", help="speaker-model EER on 8 kHz G.711 speech (MANIFEST.csv folder)"
    )
    p.add_argument("speech_dir", type=Path)
    p.add_argument("--datasets", default="speechocean762,cmu_arctic,librispeech_misc")
    p.add_argument("--per-speaker", type=int, default=4)
    p.add_argument("--json", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from detectors.model_store import ModelSettings, ModelStore

    root = args.models_dir or ModelSettings().models_dir
    store = ModelStore(root)
    if args.verb == "list":
        rows = [
            {
                "name": i.manifest.name,
                "version": i.manifest.version,
                "dimension": i.manifest.dimension.value,
                "rate": i.manifest.input.sample_rate,
                "window_s": i.manifest.input.window / i.manifest.input.sample_rate,
                "hop_s": i.manifest.input.hop / i.manifest.input.sample_rate,
                "fixture": i.manifest.fixture,
                "licence": i.manifest.licence,
                "sha256": i.manifest.sha256,
                "cpu_ms_per_window": _cpu_ms(i),
            }
            for i in store.installed()
        ]
        if args.json:
            print(json.dumps({"models_dir": str(root), "models": rows}, indent=2))
        else:
            print(f"models in {root}:" if rows else f"no models in {root}")
            for r in rows:
                tag = "  [test fixture]" if r["fixture"] else ""
                print(
                    f"  {r['name']} {r['version']}  {r['dimension']}  {r['rate']} Hz  "
                    f"window {r['window_s']:.2f} s hop {r['hop_s']:.2f} s  {r['licence']}{tag}"
                )
                cost = r["cpu_ms_per_window"]
                print(
                    "    CPU per window (1 thread, this machine): "
                    + (f"{cost:.1f} ms" if cost is not None else "n/a (unverified or broken)")
                )
        return 0
    if args.verb == "verify":
        checks = store.verify()
        for c in checks:
            print(f"{'ok ' if c.ok else 'BAD'} {c.key}{'' if c.ok else ': ' + c.problem}")
        if not checks:
            print(f"no models in {root}")
        return 0 if all(c.ok for c in checks) else 1
    if args.verb == "install":
        try:
            installed = store.install(args.source, args.manifest)
        except ValueError as exc:
            print(f"error: {exc}")
            return 1
        print(f"installed {installed.manifest.key} -> {installed.model_path}")
        return 0
    if args.verb == "build-fixtures":
        from detectors.fixture_models import all_fixtures

        for data, manifest in all_fixtures(tiny=args.tiny):
            installed = store.add_built(data, manifest)
            print(
                f"built {installed.manifest.key} (runtime test fixture) -> {installed.model_path}"
            )
        return 0
    if args.verb == "import-aasist":
        from detectors.aasist.importer import run_cli

        return run_cli(args.checkpoint, args.out or root, args.variant)
    if args.verb == "derive-speaker":
        from detectors.speaker.deriver import run_cli as derive

        rc = derive(args.out or root, args.weights, args.window_s, args.hop_s, args.reference_audio)
        if rc != 0 or args.cohort_from is None:
            return rc
        from detectors.speaker.cohort import run_cli as build_cohort

        return build_cohort(ModelStore(args.out or root), args.cohort_from, "speechocean762", 0.25)
    if args.verb == "build-cohort":
        from detectors.speaker.cohort import run_cli as build_cohort

        return build_cohort(store, args.speech_dir, args.datasets, args.fraction, args.top_k)
    if args.verb == "train-synthetic":
        from detectors.synthetic.build import run_cli as train_synthetic

        try:
            families = training_families(args.with_family)
        except ValueError as exc:
            print(f"error: {exc}")
            return 2
        return train_synthetic(
            args.out or root,
            args.work,
            args.speech_dir,
            args.seed,
            args.quick,
            args.hold_out_family,
            args.lofo,
            args.stage2,
            families,
            args.arch,
            codec_aug=args.codec_aug,
            rawboost=args.rawboost,
            loss=args.loss,
            with_bonafide=tuple(dict.fromkeys(args.with_bonafide or ())),
            paired=args.paired,
            restart=args.restart,
            distil=args.distil,
            restarts=args.restarts,
            windows=args.windows,
            epochs=args.epochs,
        )
    if args.verb == "fuse-synthetic":
        from detectors.synthetic.fuse import run_cli as fuse_synthetic

        return fuse_synthetic(
            args.a, args.b, args.weight, args.out or root, args.work, args.speech_dir,
            args.seed, args.quick,
        )  # fmt: skip
    if args.verb == "install-vad":
        from detectors.vad.install import run_cli as install_vad

        return install_vad(args.out or root)
    if args.verb == "eval-speaker":
        from detectors.speaker.evaluate import run_cli as eval_speaker

        return eval_speaker(store, args.speech_dir, args.datasets, args.per_speaker, args.json)
    raise AssertionError(args.verb)


def _cpu_ms(installed: Any) -> float | None:
    """Per-window CPU cost measured here; None when the file does not match its manifest's
    sha256 (never load an unverified model) or does not load or run."""
    from detectors.manifest import sha256_file
    from detectors.model_cost import cpu_ms_per_window

    try:
        if sha256_file(installed.model_path) != installed.manifest.sha256:
            return None
        if installed.manifest.name == "silero-vad":  # stateful: its own stepping loop
            from detectors.vad.silero import cpu_ms_per_window as vad_ms

            return round(vad_ms(installed.model_path), 2)
        return round(cpu_ms_per_window(installed.manifest, installed.model_path), 2)
    except Exception:
        return None
