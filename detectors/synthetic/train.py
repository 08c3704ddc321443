"""Training the synthetic_voice network on telephone-channel windows, and scoring clips
the way the runtime windows a leg.

Training windows are drawn up front (in parallel): half bona fide (speakers weighted by
the square root of their file count, so one prolific voice does not dominate), half
spoof (each generator family equally likely, resynthesis and neural TTS twice as
likely, then uniform within a family); each is a random
``WINDOW`` cut of a clip (shorter clips are placed at a random offset in silence) put
through one random telephone channel (``channel.augment``); with ``paired``
(``pairs.py``, opt-in) each resynthesis spoof's bona fide partner is its own source,
cut and channelled alike, in the same batch. Then a few epochs of AdamW
with a one-cycle learning rate on the binary cross-entropy. An optional second stage
(``stage2_*``, off by default: it made unseen generators worse) continues from the
first stage's weights on freshly drawn windows, through the wide channel
(reverberation, upstream GSM / Opus) or the first stage's, at a lower peak learning
rate. Seeded throughout.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.synthetic.channel import RATE, augment, to_8k  # noqa: F401
from detectors.synthetic.dataset import Clip, _stable
from detectors.synthetic.generators import SYSTEMS

FloatArray = npt.NDArray[np.float32]
WINDOW = 3 * RATE  # 3 s
HOP = WINDOW // 2
MIN_NET_SPEECH_S = 1.0
SPEECH_GATE_DB = -45.0  # the frame bank's speech gate, per 2.5 ms unit
UNIT = RATE // 400  # 2.5 ms
# Spoof families drawn twice as often: resynthesis and neural TTS carry the subtle
# artefacts modern generators share; formant/diphone TTS is learnt from little data.
WIDE_CHANNEL_VERSION = 1  # bump when channel.augment(wide=True) changes (stage-2 cache key)
CODEC_AUG_VERSION = 1  # bump when the codec step (channel.augment codec_aug, lossy) changes
RAWBOOST_VERSION = 1  # bump when the RawBoost step (channel.augment rawboost) changes
FAMILY_WEIGHT = {"world": 2.0, "griffinlim": 2.0, "piper": 2.0, "kokoro": 2.0}
# opt-in families added since: in a stage's cache key only when trained on, so that the
# keys of builds without them stay as they were (cached state dicts)
OPT_IN_FAMILY_WEIGHT = {"neuralvoc": 2.0}  # neural resynthesis


def family_weight(family: str) -> float:
    return FAMILY_WEIGHT.get(family, OPT_IN_FAMILY_WEIGHT.get(family, 1.0))


@dataclass(frozen=True, slots=True)
class TrainConfig:
    windows: int = 8_000  # training windows drawn (each with its own channel)
    epochs: int = 2
    batch: int = 32
    lr: float = 3e-3
    weight_decay: float = 1e-3
    codec_aug: bool = False  # channel.augment's perceptual-codec step (--codec-aug)
    rawboost: bool = False  # channel.augment's RawBoost-style step (--rawboost)
    # Stage 2 is off: continuing 8,000 fresh windows x 2 epochs (either channel) fits the
    # trained families better and the unseen ones worse (dev 9.5 -> 12-16 %, Gemini EER on
    # test 20 -> 37 %; docs/models/synthetic_voice.md). Kept to reproduce that measurement.
    stage2_windows: int = 0  # fresh windows after stage 1 (e.g. 8_000); 0: no stage 2
    stage2_epochs: int = 2
    stage2_lr: float = 1e-3
    stage2_wide: bool = True  # stage 2 through the wide channel (False: the stage-1 one)
    arch: str = "cnn"  # the network (ARCHS): cnn, cnn-phase (model.py), aasist(-lite) (aasist_net)
    loss: str = "bce"  # LOSSES: binary cross-entropy, or the one-class softmax (ocsoftmax.py)
    paired: bool = False  # resynthesis spoofs beside their own source windows (pairs.py)
    # --restart: 0 trains from the build seed's initial weights and batch order; n > 0
    # from restart_seed(seed, n), on the same split, spoofs and windows, so that builds
    # of one recipe that differ in nothing else show how far training alone spreads
    restart: int = 0
    # --distil K: a student of restarts 0 .. K-1 (distil.py); 0: trained on the labels alone
    distil: int = 0


QUICK = TrainConfig(windows=96, epochs=1, batch=16, stage2_windows=32, stage2_epochs=1)
ARCHS = ("cnn", "aasist", "cnn-phase", "aasist-lite")
LOSSES = ("bce", "ocsoftmax")
PHASE_VERSION = 1  # bump when the cnn-phase channels (phase.py) change (its cache key)


def restart_seed(seed: int, restart: int) -> int:
    """The seed of initial weights and batch order: the build's ``seed`` itself for
    restart 0, else one derived from (seed, restart)."""
    if restart < 0:
        raise ValueError("a restart is 0 or more")
    return seed if restart == 0 else _stable("restart", seed, restart)


def new_model(arch: str, loss: str = "bce") -> Any:
    """A freshly initialised network of ``arch`` (torch), with the one-class head when
    ``loss`` is ocsoftmax."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r} (one of {', '.join(LOSSES)})")
    net = _new_net(arch)
    if loss == "bce":
        return net
    from detectors.synthetic import ocsoftmax

    return ocsoftmax.wrap(net)


def _new_net(arch: str) -> Any:
    if arch in ("aasist", "aasist-lite"):
        from detectors.synthetic import aasist_net

        return aasist_net.build_model(aasist_net.CONFIGS[arch])
    if arch not in ("cnn", "cnn-phase"):
        raise ValueError(f"unknown architecture {arch!r} (one of {', '.join(ARCHS)})")
    from detectors.synthetic.model import NetConfig, build_model

    return build_model(NetConfig(phase=arch == "cnn-phase"))


_AUDIO: list[FloatArray] = []  # set before the pool forks (workers inherit it)


def _init(audio: list[FloatArray]) -> None:
    global _AUDIO
    _AUDIO = audio


def _window(task: tuple[int, int, bool, bool, bool, int]) -> npt.NDArray[np.int16]:
    """One window of clip ``idx``; ``span`` > 0: cut within its first ``span`` samples
    (a pair's shorter length, so both halves get the same offset), else its length."""
    idx, seed, wide, codec_aug, rawboost, span = task
    rng = np.random.default_rng(seed)
    x = _AUDIO[idx]
    x = x[:span] if span else x
    out = np.zeros(WINDOW, np.float32)
    if len(x) >= WINDOW:
        start = int(rng.integers(len(x) - WINDOW + 1))
        out[:] = x[start : start + WINDOW]
    else:
        start = int(rng.integers(WINDOW - len(x) + 1))
        out[start : start + len(x)] = x
    y = augment(out, rng, wide, codec_aug, rawboost)
    return np.clip(np.round(y * 32768.0), -32768, 32767).astype(np.int16)


def sampling_weights(train: Sequence[Clip]) -> tuple[FloatArray, FloatArray]:
    """(bona fide weights, spoof weights) over ``train``, each summing to 1 (zero for
    the other class)."""
    per_speaker = Counter(c.speaker for c in train if c.label == 0)
    per_family = Counter(c.family for c in train if c.label == 1)
    bona = np.array([1 / np.sqrt(per_speaker[c.speaker]) if c.label == 0 else 0.0 for c in train])
    spoof = np.array(
        [family_weight(c.family) / per_family[c.family] if c.label == 1 else 0.0 for c in train]
    )
    if not bona.sum() or not spoof.sum():
        raise ValueError("training needs both bona fide and spoof clips")
    return (bona / bona.sum()).astype(np.float32), (spoof / spoof.sum()).astype(np.float32)


def draw_windows(
    train: Sequence[Clip],
    audio: Sequence[FloatArray],
    n: int,
    seed: int,
    workers: int | None = None,
    wide: bool = False,
    codec_aug: bool = False,
    rawboost: bool = False,
    paired: bool = False,
    progress: Callable[[str], None] | None = None,
) -> tuple[npt.NDArray[np.int16], FloatArray]:
    """``n`` augmented training windows (int16) and their labels (1 = spoof), bona fide
    at even indices; ``wide``: through the wide channel, ``codec_aug``: with the
    perceptual-codec step, ``rawboost``: with the RawBoost-style step
    (``channel.augment``); ``paired``: each resynthesis spoof with its source's window
    before it (``pairs.pair``)."""
    rng = np.random.default_rng(seed)
    wb, ws = sampling_weights(train)
    labels = (np.arange(n) % 2).astype(np.float32)
    picks = np.where(labels == 1, rng.choice(len(train), n, p=ws), rng.choice(len(train), n, p=wb))
    seeds = rng.integers(1 << 31, size=n)
    spans = np.zeros(n, np.int64)
    if paired:
        from detectors.synthetic import pairs

        picks, seeds, spans, made = pairs.pair(picks, seeds, [len(a) for a in audio], train)
        if progress:
            progress(f"{made} of {n // 2} spoof windows paired with their source's window")
    tasks = [
        (int(i), int(s), wide, codec_aug, rawboost, int(sp))
        for i, s, sp in zip(picks, seeds, spans, strict=True)
    ]
    workers = workers or max(1, os.cpu_count() or 1)
    if workers == 1 or n < 64:
        _init(list(audio))
        rows = [_window(t) for t in tasks]
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_init, initargs=(list(audio),)) as pool:
            rows = pool.map(_window, tasks, chunksize=64)
    return np.stack(rows), labels


def train(
    windows: npt.NDArray[np.int16],
    labels: FloatArray,
    cfg: TrainConfig,
    seed: int,
    progress: Callable[[str], None] | None = None,
    init: Any = None,
) -> tuple[Any, list[float]]:
    """The trained network (eval mode) and the mean loss of each epoch; ``labels`` may be
    soft (a student's targets, distil.py); ``init``: a state dict to start from (the second
    stage), which also selects the stage-2 schedule."""
    import torch

    from detectors.synthetic import ocsoftmax

    if cfg.distil:
        from detectors.synthetic import distil

        seed = distil.seed(seed, cfg.distil)
    else:
        seed = restart_seed(seed, cfg.restart)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = new_model(cfg.arch, cfg.loss)
    lr, epochs = cfg.lr, cfg.epochs
    if init is not None:
        model.load_state_dict(init)
        lr, epochs = cfg.stage2_lr, cfg.stage2_epochs
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, len(windows) // cfg.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=steps_per_epoch * epochs
    )
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    model.train()
    for epoch in range(epochs):
        if cfg.paired:  # a pair is never split across batches
            from detectors.synthetic import pairs

            order = pairs.batch_order(len(windows), rng)
        else:
            order = rng.permutation(len(windows))
        total = 0.0
        for step in range(steps_per_epoch):
            idx = order[step * cfg.batch : (step + 1) * cfg.batch]
            x = torch.from_numpy(windows[idx].astype(np.float32) / 32768.0)
            y = torch.from_numpy(labels[idx]).unsqueeze(1)
            opt.zero_grad()
            loss: torch.Tensor
            if cfg.loss == "ocsoftmax":
                loss = ocsoftmax.loss(model.cosine(x), y.squeeze(1))
            else:
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model.logit(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
            total += loss.item()
            if progress and (step + 1) % 25 == 0:
                progress(f"  step {step + 1}/{steps_per_epoch}: mean loss {total / (step + 1):.4f}")
        losses.append(total / steps_per_epoch)
        if progress:
            progress(f"epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f}")
    model.eval()
    return model, losses


def stage_key(
    cfg: TrainConfig, stage: int, systems: Sequence[str] = (), bonafide: Sequence[str] = ()
) -> str:
    """A short digest of the settings a stage's weights depend on (its cache key):
    ``systems``, the training spoof systems, so that adding a generator retrains;
    ``bonafide``, the speakers ``--with-bonafide`` added (likewise)."""
    import hashlib

    from detectors.synthetic import ivr_voices

    fields: tuple[object, ...] = (cfg.windows, cfg.epochs, cfg.batch, cfg.lr, cfg.weight_decay)
    if systems:
        fields += (tuple(sorted(set(systems))), tuple(sorted(FAMILY_WEIGHT.items())))
        revised = sorted((s.id, s.revision) for s in SYSTEMS if s.revision and s.id in systems)
        if revised:  # keys of systems never revised stay as they were
            fields += (tuple(revised),)
        trained = {s.split("_", 1)[0] for s in systems}
        opt_in = sorted((f, w) for f, w in OPT_IN_FAMILY_WEIGHT.items() if f in trained)
        if opt_in:
            fields += (tuple(opt_in),)
    fields += ivr_voices.key_fields(bonafide)
    if cfg.codec_aug:  # keys without it stay as they were (cached state dicts)
        fields += ("codec_aug", CODEC_AUG_VERSION)
    if cfg.rawboost:
        fields += ("rawboost", RAWBOOST_VERSION)
    if cfg.paired:
        from detectors.synthetic import pairs

        fields += ("paired", pairs.VERSION)
    if cfg.restart:
        fields += ("restart", cfg.restart)
    if cfg.distil:
        from detectors.synthetic import distil

        fields += ("distil", cfg.distil, distil.VERSION, distil.WEIGHT)
    if cfg.loss != "bce":  # bce keys stay as they were (cached state dicts)
        from detectors.synthetic import ocsoftmax

        fields += (cfg.loss, ocsoftmax.VERSION, ocsoftmax.MARGIN_BONAFIDE)
        fields += (ocsoftmax.MARGIN_SPOOF, ocsoftmax.ALPHA)
    if stage == 2:
        fields += (cfg.stage2_windows, cfg.stage2_epochs, cfg.stage2_lr)
        fields += (WIDE_CHANNEL_VERSION,) if cfg.stage2_wide else ("narrow",)
    if cfg.arch in ("aasist", "aasist-lite"):  # the CNN's keys stay as they were (cached)
        from detectors.synthetic import aasist_net

        fields += (cfg.arch, aasist_net.CONFIGS[cfg.arch].key_repr())
    elif cfg.arch != "cnn":
        from detectors.synthetic import model, phase

        cfg_net = model.NetConfig(phase=True)
        fields += (cfg.arch, repr(cfg_net), PHASE_VERSION, phase.GATE_REL)
    return hashlib.sha256(repr(fields).encode()).hexdigest()[:10]


def from_state(state: dict[str, Any], arch: str = "cnn", loss: str = "bce") -> Any:
    """The ``arch`` network (with ``loss``'s head) with a cached state dict (eval mode)."""
    model = new_model(arch, loss)
    model.load_state_dict(state)
    model.eval()
    return model


# ---- scoring clips as the runtime windows a leg ------------------------------------------


def runtime_windows(x8: FloatArray) -> FloatArray:
    """The windows the runtime would score on this 8 kHz audio: ending at WINDOW,
    WINDOW + HOP, ...; those with less than MIN_NET_SPEECH_S above the speech gate
    abstain (left out). [n, WINDOW], possibly empty."""
    gate = 10 ** (SPEECH_GATE_DB / 10)
    rows = []
    for end in range(WINDOW, len(x8) + 1, HOP):
        seg = x8[end - WINDOW : end]
        power = np.mean(seg.reshape(-1, UNIT) ** 2, axis=1)
        if np.count_nonzero(power > gate) * UNIT / RATE >= MIN_NET_SPEECH_S:
            rows.append(seg)
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, WINDOW), np.float32)


def clip_scores(
    score_batch: Callable[[FloatArray], FloatArray],
    audio: Sequence[FloatArray],
    transform: Callable[[FloatArray, int], FloatArray],
) -> list[float | None]:
    """Per clip: the mean P(spoof) of its scored windows after ``transform`` (a
    channel condition), or None when no window is scored."""
    out: list[float | None] = []
    for i, x in enumerate(audio):
        w = runtime_windows(transform(x, i))
        out.append(float(np.mean(score_batch(w))) if len(w) else None)
    return out


def threshold_at_fa(bonafide: Sequence[float], max_fa: float) -> float:
    """The lowest threshold whose false-alarm rate (score >= t) on ``bonafide`` is at
    most ``max_fa``: just above the (k+1)-th highest score, k = floor(max_fa * n)."""
    b = np.sort(np.asarray(bonafide, float))[::-1]
    if not b.size:
        raise ValueError("no bona fide scores to set a threshold on")
    k = int(np.floor(max_fa * b.size))
    return float(min(1.0, np.nextafter(b[k], np.inf)))


def window_scores(
    score_batch: Callable[[FloatArray], FloatArray],
    audio: Sequence[FloatArray],
    transform: Callable[[FloatArray, int], FloatArray],
) -> list[float]:
    """Every scored window's P(spoof), all clips after ``transform``, in one list (the
    runtime alerts on windows; a call's mean is less spread than its windows)."""
    out: list[float] = []
    for i, x in enumerate(audio):
        w = runtime_windows(transform(x, i))
        if len(w):
            out.extend(float(v) for v in score_batch(w))
    return out


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in log space (n up to many thousands)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def quantile_upper_bound(bonafide: Sequence[float], max_fa: float, confidence: float) -> float:
    """A threshold that flags at most ``max_fa`` of genuine calls with probability
    ``confidence`` (distribution-free, for independent scores): just above the smallest
    order statistic X_(r) (ascending, 1-based) that bounds the (1 - max_fa) quantile q
    from above with that confidence, P(X_(r) >= q) = P(Binomial(n, 1 - max_fa) <= r - 1)
    >= confidence. With too few scores for any such r (n < log(1 - confidence) /
    log(1 - max_fa): 149 at 2 % and 95 %) no bound exists and the highest score is the
    most the evidence allows: just above it."""
    b = np.sort(np.asarray(bonafide, float))
    if not b.size:
        raise ValueError("no bona fide scores to set a threshold on")
    if not (0.0 < max_fa < 1.0 and 0.0 < confidence < 1.0):
        raise ValueError("max_fa and confidence must lie strictly between 0 and 1")
    n, p = int(b.size), 1.0 - max_fa
    r = n
    lo, hi = 1, n  # the cdf rises with r: the smallest r with cdf(r - 1) >= confidence
    if _binom_cdf(n - 1, n, p) >= confidence:
        while lo < hi:
            mid = (lo + hi) // 2
            if _binom_cdf(mid - 1, n, p) >= confidence:
                hi = mid
            else:
                lo = mid + 1
        r = lo
    return float(min(1.0, np.nextafter(b[r - 1], np.inf)))


def by_family(clips: Sequence[Clip], scores: Sequence[float | None]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for c, s in zip(clips, scores, strict=True):
        if s is not None:
            out[c.family].append(s)
    return dict(out)
