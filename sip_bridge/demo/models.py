"""The models the demo needs, checked (and, where they derive locally, made) at startup
through ``callshield models``: Silero VAD (``install-vad``, ~2 s), the speaker model
(``derive-speaker``, ~40 s once) and its S-norm cohort (``build-cohort``, ~10 s once).
The synthetic-voice model takes about an hour to train (2 cores): it is never made here,
only reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from detectors.alert_schema import Dimension
from detectors.model_store import ModelStore


@dataclass(slots=True)
class ModelState:
    speaker: bool = False
    cohort: bool = False
    vad: bool = False
    synthetic: list[str] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)  # what this run made, with seconds
    problems: list[str] = field(default_factory=list)


def inspect(models_dir: Path) -> ModelState:
    from detectors.speaker.cohort import cohort_path
    from detectors.speaker.deriver import NAME as SPEAKER
    from detectors.vad.install import NAME as VAD

    state = ModelState()
    store = ModelStore(models_dir)
    for found in store.installed():
        m = found.manifest
        if m.fixture:
            continue
        if m.name == SPEAKER:
            state.speaker = True
            state.cohort = state.cohort or cohort_path(models_dir, m).is_file()
        elif m.name == VAD:
            state.vad = True
        elif m.dimension is Dimension.SYNTHETIC_VOICE:
            state.synthetic.append(f"{m.name} {m.version}")
    return state


def ensure(models_dir: Path, speech_root: Path | None, cli: Callable[..., str]) -> ModelState:
    """Derive what is missing and derivable; ``cli(*args)`` runs a product command."""
    state = inspect(models_dir)
    steps: list[tuple[str, bool, tuple[str, ...]]] = [
        ("Silero VAD", state.vad, ("install-vad",)),
        ("speaker model", state.speaker, ("derive-speaker",)),
    ]
    if speech_root is not None and (speech_root / "MANIFEST.csv").is_file():
        steps.append(("speaker cohort", state.cohort, ("build-cohort", str(speech_root))))
    for label, present, args in steps:
        if present:
            continue
        print(f"  {label} missing: `callshield models {args[0]}` (one time) ...", flush=True)
        started = time.monotonic()
        try:
            cli("models", "--models-dir", str(models_dir), *args)
        except RuntimeError as exc:
            if "interrupted" in str(exc):
                break  # Ctrl-C: nothing more to derive
            state.problems.append(f"{label}: {str(exc).splitlines()[-1][:200]}")
            continue
        state.derived.append(f"{label} ({time.monotonic() - started:.0f} s)")
    final = inspect(models_dir)
    final.derived, final.problems = state.derived, state.problems
    return final
