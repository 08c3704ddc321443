"""``callshield eval --watchlist-sizes 10,100,1000``: per-call false-match and hit rates of
known_fraudster per watchlist size, through the bridge's own scoring code
(``SpeakerBiometrics``: speech-weighted aggregate, S-norm, threshold per size), on
8 kHz G.711 speech of speakers the cohort never saw.

Data (a MANIFEST.csv speech folder), per speaker outside the cohort (``in_cohort``) of
``datasets`` and ``probe_datasets``, utterances in manifest order, net speech counted as
the bridge counts it (telephone path, 3 s windows, each later window its new part):
- enrolment: the leading utterances until ``enrol_net_speech_s`` (``callshield watchlist
  add``'s minimum, 3 s), each file embedded on its own as that command does;
- hit probe: the following utterances back to back, one call, until the bridge's search
  point ``min_net_speech_s`` (6 s by default); a speaker with both can be *listed*;
- impostor calls: the speaker's utterances back to back, cut into calls that each reach
  the search point (at most ``calls_per_speaker``); a speaker with less audio makes no
  call the bridge would search. The report counts, per dataset, how many speakers can
  be listed and how many can call.
- per fold, a random part of the listable speakers is listed, every other speaker calls
  as an impostor;
- a watchlist larger than the listed speakers is filled with speed-perturbed copies of
  the listed speakers' enrolment audio (×0.9, ×0.95, ×1.05, ×1.1: new pseudo-speakers,
  as in Kaldi's speed perturbation) and then with two listed speakers' enrolment audio
  back to back. None of them shares a speaker with an impostor caller. A listed
  speaker's hit probe is searched without the pseudo-entries made from their own audio
  (the same voice, not another person; with them, they took rank 1 from the real entry:
  reported as ``hit_rate_own_pseudo_competing``).
- a call is a false match when its known_fraudster result (the watchlist is searched
  once, at ``min_net_speech_s``) reaches the policy threshold; a hit when the listed
  speaker's own entry is the one matched. The same scores are also counted at the
  threshold the Gaussian calibration alone would have chosen (before the tail fit).
- handoff: an unlisted caller claims their own enrolled account, then hands the phone
  to another unlisted speaker ("let me put my wife on"): the call's highest band under
  the default policy (fusion included) is counted.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from detectors.alert_schema import Alert, Band, Dimension, LegRole, ScoreUpdate
from detectors.bus.biometrics import BiometricsMode
from detectors.contract import FloatArray, WindowKey, WindowQuality, WindowResult
from detectors.fusion import Fusion, Policy
from detectors.speaker.biometrics_stage import BiometricsConfig, SpeakerBiometrics
from detectors.speaker.cohort import Clip, Embedder, corpus, in_cohort, net_speech
from detectors.speaker.scoring import SLOPE, Cohort, gaussian_threshold_for_size
from detectors.speaker.shared_state import StaticSpeakerState
from detectors.speaker.watchlist_index import WatchlistIndex

PROBE_DATASETS = (
    "librispeech_misc",
    "cmu_arctic",
    "ljspeech",
    "asterisk_prompts",
    "osr",
    "ami",
    "commonvoice",
)
SPEEDS = (0.9, 0.95, 1.05, 1.1)
TENANT = "eval"


@dataclass(frozen=True, slots=True)
class WatchlistEvalConfig:
    sizes: tuple[int, ...]
    target_rate: float = 0.001
    min_net_speech_s: float = 6.0  # the bridge's CALLSHIELD_BIOMETRICS_MIN_NET_SPEECH_S
    enrol_net_speech_s: float = 3.0  # ``callshield watchlist add|enrol``'s minimum
    folds: int = 10
    seed: int = 0
    datasets: tuple[str, ...] = ("speechocean762",)
    probe_datasets: tuple[str, ...] = PROBE_DATASETS
    listed_share: float = 0.72
    mixtures: int = 1200
    handoffs: int = 100
    max_speakers: int | None = None
    calls_per_speaker: int = 5  # impostor calls of one unlisted speaker, at most


@dataclass
class _Tally:
    impostor_calls: int = 0
    false_matches: int = 0
    impostor_scores: list[float] = field(default_factory=list)  # max S-norm per call
    targets: int = 0
    hits: int = 0
    hits_with_own_pseudo: int = 0  # hits had own-voice pseudo-entries competed (before)
    target_scores: list[float] = field(default_factory=list)  # own entry's S-norm
    entries: dict[str, int] = field(default_factory=dict)
    speakers: set[str] = field(default_factory=set)
    target_speakers: set[str] = field(default_factory=set)
    false_match_pairs: list[str] = field(default_factory=list)  # "caller -> entry"
    threshold: float = 0.0


class _Collect:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def publish_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        return None


def windows(call_id: str, clip: Clip, window_s: float, hop_s: float) -> list[WindowResult]:
    """The speaker model's window results for a call's external leg."""
    out = []
    for i, (e, sp) in enumerate(zip(clip.embeddings, clip.speech_s, strict=True)):
        key = WindowKey(call_id, "caller", LegRole.EXTERNAL, i * hop_s, i * hop_s + window_s)
        out.append(
            WindowResult(
                key=key,
                detector="speaker",
                model_version="eval",
                dimension=Dimension.VOICE_MISMATCH,
                provider="cpu",
                score=0.0,
                threshold=0.5,
                abstained=None,
                quality=WindowQuality(net_speech_s=float(sp)),
                embedding=np.asarray(e, np.float32),
            )
        )
    return out


def _snorm(unit: float, threshold: float) -> float:
    u = min(max(unit, 1e-12), 1 - 1e-12)
    return threshold + math.log(u / (1 - u)) / SLOPE


def take(
    n: int, start: int, need_s: float, speech_of: Callable[[list[int]], float]
) -> tuple[list[int], int] | None:
    """Utterances ``start, start + 1, ...`` of ``n`` until ``speech_of`` them reaches
    ``need_s``: (their indices, the next index), or None when the rest falls short."""
    idx: list[int] = []
    for i in range(start, n):
        idx.append(i)
        if speech_of(idx) >= need_s:
            return idx, i + 1
    return None


@dataclass(frozen=True, slots=True)
class SpeakerPlan:
    """Which utterances of one speaker make what (indices in manifest order).

    ``enrol``: the leading utterances until the enrolment minimum (None: not enough);
    ``probe``: the next ones, back to back as one call, until the bridge's search point
    (None: not enough after the enrolment: the speaker cannot be a listed target);
    ``calls``: the speaker's audio cut into back-to-back calls that each reach the search
    point (used when the speaker is not listed: impostor calls; empty: a call this short
    is never searched by the bridge)."""

    enrol: list[int] | None
    probe: list[int] | None
    calls: list[list[int]]

    @property
    def target(self) -> bool:
        return self.enrol is not None and self.probe is not None


def plan_speaker(
    n: int,
    enrol_s: float,
    probe_s: float,
    enrol_speech: Callable[[list[int]], float],
    call_speech: Callable[[list[int]], float],
    max_calls: int,
) -> SpeakerPlan:
    """Enrolment, hit probe and impostor calls of a speaker with ``n`` utterances."""
    e = take(n, 0, enrol_s, enrol_speech)
    probe = take(n, e[1], probe_s, call_speech) if e is not None else None
    calls: list[list[int]] = []
    start = 0
    while len(calls) < max_calls:
        c = take(n, start, probe_s, call_speech)
        if c is None:
            break
        calls.append(c[0])
        start = c[1]
    return SpeakerPlan(e[0] if e else None, probe[0] if probe else None, calls)


def accounted_speech(speech_s: Sequence[float], share: float) -> float:
    """Net speech the bridge counts for a call's windows: the first window in full, each
    later (overlapping) window its new part (``hop / window``)."""
    if not speech_s:
        return 0.0
    return float(speech_s[0]) + share * float(sum(speech_s[1:]))


def own_voice(entry_id: str, speaker: str) -> bool:
    """Whether a watchlist entry was made from ``speaker``'s audio (their real entry, a
    speed-perturbed copy, or a two-speaker mixture with them in it)."""
    kind, _, rest = entry_id.partition(":")
    if kind == "real":
        return rest == speaker
    if kind == "speed":
        return rest.rsplit(":", 1)[0] == speaker
    if kind == "mix":
        return speaker in rest.split("+")
    return False


def without_own_voice(index: WatchlistIndex, speaker: str) -> WatchlistIndex:
    """The index minus the pseudo-entries derived from ``speaker``'s voice (their real
    entry stays), threshold unchanged: for that speaker's hit probe, a pseudo-speaker
    made from their own enrolment audio is the same voice, not another person, and would
    otherwise take rank 1 from their real entry (an artefact of filling the list)."""
    keep = [
        i for i, e in enumerate(index.ids) if e == f"real:{speaker}" or not own_voice(e, speaker)
    ]
    if len(keep) == index.size:
        return index
    k = np.asarray(keep, np.int64)
    return replace(
        index,
        ids=tuple(index.ids[i] for i in keep),
        matrix=index.matrix[k],
        entry_mu=index.entry_mu[k],
        entry_sd=index.entry_sd[k],
    )


class _Run:
    def __init__(self, cfg: WatchlistEvalConfig, cohort: Cohort, window_s: float, hop_s: float):
        self.cfg, self.cohort = cfg, cohort
        self.window_s, self.hop_s = window_s, hop_s
        self.n = 0

    def stage(self, index: WatchlistIndex) -> tuple[StaticSpeakerState, SpeakerBiometrics]:
        state = StaticSpeakerState(self.cohort)
        state.indexes[TENANT] = index
        config = BiometricsConfig(self.cfg.min_net_speech_s, BiometricsMode.FULL)
        return state, SpeakerBiometrics(state, config)

    def known_fraudster(self, bio: SpeakerBiometrics, clip: Clip) -> tuple[float, str | None]:
        """(max known_fraudster score over the call's windows, the entry matched then)."""
        self.n += 1
        cid = f"c{self.n}"
        bio.open_call(cid, TENANT)
        best, best_id = 0.0, None
        for w in windows(cid, clip, self.window_s, self.hop_s):
            for r in bio.process(w):
                kf = r.dimension is Dimension.KNOWN_FRAUDSTER
                if kf and r.score is not None and r.score > best:
                    entry = r.reasons[0].removeprefix("watchlist entry ")
                    best, best_id = r.score, entry.split(": s-norm")[0]
        bio.end_call(cid)
        return best, best_id


def _clopper_pearson_upper(k: int, n: int, conf: float = 0.95) -> float:
    if n == 0:
        return 1.0
    if k >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(conf, k + 1, n - k))


def evaluate_watchlist(
    model: Path,
    manifest: Any,
    cohort: Cohort,
    speech_dir: Path,
    cfg: WatchlistEvalConfig,
    progress: Any = None,
) -> dict[str, Any]:
    from scipy.signal import resample_poly

    from detectors.speaker.deriver import to_16k
    from detectors.speaker.evaluate import load_audio, telephone_16k, window_stack

    def say(msg: str) -> None:
        if progress is not None:
            progress(msg)

    emb = Embedder(model, manifest)
    rate = manifest.input.sample_rate
    window_s, hop_s = emb.window / rate, emb.hop / rate

    def audio(path: Path) -> FloatArray | None:
        loaded = load_audio(path)
        return None if loaded is None else to_16k(*loaded)

    share = hop_s / window_s

    def window_speech(x: FloatArray) -> list[float]:
        y = telephone_16k(x, 16_000)
        return [net_speech(row) for row in window_stack(y, emb.window, emb.hop)]

    files = {
        s: f
        for s, f in sorted(corpus(speech_dir, cfg.datasets + cfg.probe_datasets).items())
        if not in_cohort(s)
    }
    names = sorted(files)[: cfg.max_speakers]
    dataset_of = {s: d for d in cfg.datasets + cfg.probe_datasets for s in corpus(speech_dir, (d,))}
    say(f"planning {len(names)} speakers outside the cohort (telephone path)")
    enrol: dict[str, Clip] = {}
    first: dict[str, FloatArray] = {}  # enrolment audio (source of pseudo-entries)
    hit_probe: dict[str, Clip] = {}
    calls: dict[str, list[Clip]] = {}
    planned: dict[str, SpeakerPlan] = {}
    for s in names:
        utts = [x for x in (audio(p) for p in files[s]) if x is not None]
        if not utts:
            continue
        per_utt = [window_speech(u) for u in utts]

        def enrol_speech(idx: list[int], per_utt: list[list[float]] = per_utt) -> float:
            return sum(accounted_speech(per_utt[i], share) for i in idx)

        def call_speech(idx: list[int], utts: list[FloatArray] = utts) -> float:
            return accounted_speech(window_speech(np.concatenate([utts[i] for i in idx])), share)

        plan = plan_speaker(
            len(utts),
            cfg.enrol_net_speech_s,
            cfg.min_net_speech_s,
            enrol_speech,
            call_speech,
            cfg.calls_per_speaker,
        )
        planned[s] = plan
        if plan.enrol is not None and plan.probe is not None:
            parts = [emb.clip(utts[i], 16_000) for i in plan.enrol]  # one file each, as enrol
            enrol[s] = Clip(
                np.concatenate([c.embeddings for c in parts]),
                np.concatenate([c.speech_s for c in parts]),
            )
            first[s] = np.concatenate([utts[i] for i in plan.enrol])
            hit_probe[s] = emb.clip(np.concatenate([utts[i] for i in plan.probe]), 16_000)
        calls[s] = [emb.clip(np.concatenate([utts[i] for i in c]), 16_000) for c in plan.calls]
    pool = sorted(enrol)  # speakers who can be listed: enrolment + a hit probe
    if not pool:
        raise ValueError(
            f"no speaker outside the cohort has {cfg.enrol_net_speech_s} s of enrolment speech "
            f"and then {cfg.min_net_speech_s} s for a probe call in {speech_dir}"
        )
    caller = {s: c[0] for s, c in calls.items() if c}
    availability = _availability(planned, dataset_of)
    speed: dict[str, list[tuple[str, FloatArray]]] = {}
    for s in pool:
        speed[s] = [
            (
                f"speed:{s}:{f}",
                emb.clip(resample_poly(first[s], 100, round(100 * f)), 16_000).call_embedding(),
            )
            for f in SPEEDS
        ]
    rng = random.Random(cfg.seed)
    need_mix = max(cfg.sizes) > len(pool) * (1 + len(SPEEDS)) * cfg.listed_share
    mixes: list[tuple[str, str, FloatArray]] = []
    if need_mix and len(pool) >= 2:
        say(f"embedding {cfg.mixtures} two-speaker entries")
        for _ in range(cfg.mixtures):
            x, y = rng.sample(pool, 2)
            clip = emb.clip(np.concatenate([first[x], first[y]]), 16_000)
            mixes.append((x, y, clip.call_embedding()))
    n_calls = sum(len(c) for c in calls.values())
    say(f"{len(pool)} listable speakers, {n_calls} impostor-capable calls; scoring")

    run = _Run(cfg, cohort, window_s, hop_s)
    tallies = {n: _Tally() for n in cfg.sizes}
    n_listed = max(1, round(cfg.listed_share * len(pool)))
    for fold in range(cfg.folds):
        order = pool[:]
        random.Random(cfg.seed * 1000 + fold).shuffle(order)
        for size in cfg.sizes:
            t = tallies[size]
            listed = order[: min(size, n_listed)]
            unlisted = [x for x in names if x not in set(listed)]
            lset = set(listed)
            ids = [f"real:{s}" for s in listed]
            vecs = [enrol[s].call_embedding() for s in listed]
            kinds = {"real": len(ids), "speed": 0, "mixture": 0}
            for s in listed:
                for sid, v in speed[s]:
                    if len(ids) >= size:
                        break
                    ids.append(sid)
                    vecs.append(v)
                    kinds["speed"] += 1
            for x, y, v in mixes:
                if len(ids) >= size:
                    break
                if x in lset and y in lset:
                    ids.append(f"mix:{x}+{y}")
                    vecs.append(v)
                    kinds["mixture"] += 1
            t.entries = {k: max(t.entries.get(k, 0), c) for k, c in kinds.items()}
            index = WatchlistIndex.build(TENANT, 1, ids, np.stack(vecs), cohort, cfg.target_rate)
            t.threshold = index.threshold
            state, bio = run.stage(index)
            for s in listed:
                # rank 1 among the other voices: the pseudo-entries made from s's own
                # enrolment audio are left out (the same voice, not another person)
                state.indexes[TENANT] = without_own_voice(index, s)
                score, matched = run.known_fraudster(bio, hit_probe[s])
                state.indexes[TENANT] = index
                raw_score, raw_matched = run.known_fraudster(bio, hit_probe[s])
                t.targets += 1
                t.target_speakers.add(s)
                own = matched == f"real:{s}"  # another entry matching is no hit
                t.target_scores.append(_snorm(score, index.threshold) if own else -math.inf)
                if score >= 0.5 and own:
                    t.hits += 1
                if raw_score >= 0.5 and raw_matched == f"real:{s}":
                    t.hits_with_own_pseudo += 1
            probes = [(s, c) for s in unlisted for c in calls.get(s, [])]
            for s, clip in probes:
                score, matched = run.known_fraudster(bio, clip)
                t.impostor_calls += 1
                t.speakers.add(s)
                t.impostor_scores.append(_snorm(score, index.threshold))
                if score >= 0.5:
                    t.false_matches += 1
                    t.false_match_pairs.append(f"{s} -> {matched}")
    sizes_out = {
        str(n): _size_report(
            tallies[n],
            cfg.target_rate,
            gaussian_threshold_for_size(n, cfg.target_rate, cohort.calibration),
        )
        for n in cfg.sizes
    }
    return {
        "model": manifest.key,
        "speech_dir": str(speech_dir),
        "pool_speakers": len(pool),
        "impostor_call_clips": n_calls,
        "availability": availability,
        "enrol_net_speech_s": cfg.enrol_net_speech_s,
        "cohort_utterances": int(cohort.embeddings.shape[0]),
        "calibration": {
            "mean": round(cohort.calibration.mean, 4),
            "sd": round(cohort.calibration.sd, 4),
            "trials": cohort.calibration.trials,
            "tail_u": round(cohort.calibration.tail_u, 4),
            "tail_beta": round(cohort.calibration.tail_beta, 4),
            "tail_share": round(cohort.calibration.tail_share, 4),
            "top_k": cohort.top_k,
        },
        "target_rate": cfg.target_rate,
        "min_net_speech_s": cfg.min_net_speech_s,
        "folds": cfg.folds,
        "sizes": sizes_out,
        "voice_mismatch": _voice_mismatch(run, enrol, hit_probe, pool, cfg),
        "handoff": _handoffs(
            run, cohort, enrol, caller, [x for x in pool if x in caller], cfg, tallies, mixes, speed
        ),
    }


def _availability(planned: dict[str, SpeakerPlan], dataset_of: dict[str, str]) -> dict[str, Any]:
    """Per dataset: speakers outside the cohort, how many can be listed targets (enough
    enrolment speech, then enough for a probe call), how many make at least one call that
    reaches the search point, and how many calls."""
    out: dict[str, dict[str, int]] = {}
    for s, plan in planned.items():
        d = out.setdefault(dataset_of[s], {"speakers": 0, "targets": 0, "callers": 0, "calls": 0})
        d["speakers"] += 1
        d["targets"] += plan.target
        d["callers"] += bool(plan.calls)
        d["calls"] += len(plan.calls)
    return dict(sorted(out.items()))


def _size_report(t: _Tally, target: float, gaussian: float) -> dict[str, Any]:
    imp = sorted(t.impostor_scores, reverse=True)
    allowed = math.floor(target * len(imp))
    needed = imp[allowed] if allowed < len(imp) else float("-inf")
    hits_at_needed = sum(1 for s in t.target_scores if s > needed)
    fm_gauss = sum(1 for s in imp if s >= gaussian)
    return {
        "gaussian_threshold_snorm": round(gaussian, 3),
        "false_matches_at_gaussian": fm_gauss,
        "hit_rate_at_gaussian": sum(1 for s in t.target_scores if s >= gaussian)
        / max(len(t.target_scores), 1),
        "false_match_upper95_by_calls": _clopper_pearson_upper(t.false_matches, t.impostor_calls),
        "entries": t.entries,
        "threshold_snorm": round(t.threshold, 3),
        "impostor_calls": t.impostor_calls,
        "impostor_speakers": len(t.speakers),
        "false_matches": t.false_matches,
        "false_match_rate": t.false_matches / max(t.impostor_calls, 1),
        "false_match_pairs": sorted(t.false_match_pairs),
        "false_match_upper95_by_speakers": _clopper_pearson_upper(
            min(t.false_matches, len(t.speakers)), len(t.speakers)
        ),
        "target_calls": t.targets,
        "hits": t.hits,
        "hit_rate": t.hits / max(t.targets, 1),
        "hit_rate_own_pseudo_competing": t.hits_with_own_pseudo / max(t.targets, 1),
        "target_speakers": len(t.target_speakers),
        "max_impostor_snorm": round(imp[0], 3) if imp else None,
        "threshold_needed_on_this_data": round(needed, 3),
        "hit_rate_at_needed": hits_at_needed / max(len(t.target_scores), 1),
    }


def _voice_mismatch(
    run: _Run,
    enrol: dict[str, Clip],
    probe: dict[str, Clip],
    pool: Sequence[str],
    cfg: WatchlistEvalConfig,
) -> dict[str, Any]:
    """Claimed account enrolled from utterance 1; the caller is its owner (utterance 2)
    or another pool speaker. Final-aggregate mismatch score vs the policy threshold."""
    state, bio = run.stage(WatchlistIndex.empty(TENANT, run.cohort.dim))
    thr = Policy().for_dimension(Dimension.VOICE_MISMATCH).threshold
    rng = random.Random(cfg.seed + 7)
    genuine = impostor = false_alarms = caught = 0
    for s in pool:
        state.enrol(TENANT, s, enrol[s].call_embedding(), "eval")
    for s in pool:
        for other in (s, rng.choice([p for p in pool if p != s])):
            run.n += 1
            cid = f"v{run.n}"
            bio.open_call(cid, TENANT)
            bio.claim(cid, claimed_account=s, enrolled=state.enrolment(TENANT, s))
            last = None
            for w in windows(cid, probe[other], run.window_s, run.hop_s):
                for r in bio.process(w):
                    if r.detector == "enrolment" and r.score is not None:
                        last = r.score
            bio.end_call(cid)
            flagged = last is not None and last >= thr
            if other == s:
                genuine += 1
                false_alarms += flagged
            else:
                impostor += 1
                caught += flagged
    return {
        "policy_threshold": thr,
        "verify_threshold_snorm": round(bio.verify_threshold, 3),
        "genuine_calls": genuine,
        "genuine_flagged_rate": false_alarms / max(genuine, 1),
        "impostor_calls": impostor,
        "impostor_flagged_rate": caught / max(impostor, 1),
    }


def _handoffs(
    run: _Run,
    cohort: Cohort,
    enrol: dict[str, Clip],
    caller: dict[str, Clip],
    pool: Sequence[str],
    cfg: WatchlistEvalConfig,
    tallies: dict[int, _Tally],
    mixes: list[tuple[str, str, FloatArray]],
    speed: dict[str, list[tuple[str, FloatArray]]],
) -> dict[str, Any]:
    """Account owner A, then B on the same phone, against the largest watchlist built
    from speakers other than A and B; highest band under the default policy."""
    rng = random.Random(cfg.seed + 11)
    size = max(cfg.sizes)
    bands = {b.value: 0 for b in Band}
    for i in range(min(cfg.handoffs, max(0, len(pool) // 2))):
        a, b = rng.sample(list(pool), 2)
        others = [s for s in pool if s not in (a, b)]
        ids = [f"real:{s}" for s in others][:size]
        vecs = [enrol[s].call_embedding() for s in others][:size]
        for s in others:
            for sid, v in speed[s]:
                if len(ids) < size:
                    ids.append(sid)
                    vecs.append(v)
        for x, y, v in mixes:
            if len(ids) < size and a not in (x, y) and b not in (x, y):
                ids.append(f"mix:{x}+{y}")
                vecs.append(v)
        index = WatchlistIndex.build(TENANT, 1, ids, np.stack(vecs), cohort, cfg.target_rate)
        state, bio = run.stage(index)
        state.enrol(TENANT, a, enrol[a].call_embedding(), "eval")
        sink = _Collect()
        fusion = Fusion(sink, Policy())
        cid = f"h{i}"
        bio.open_call(cid, TENANT)
        fusion.open_call(cid)
        bio.claim(cid, claimed_account=a, enrolled=state.enrolment(TENANT, a))
        clip = Clip(
            np.concatenate([caller[a].embeddings, caller[b].embeddings]),
            np.concatenate([caller[a].speech_s, caller[b].speech_s]),
        )
        for w in windows(cid, clip, run.window_s, run.hop_s):
            for r in bio.process(w):
                fusion.on_result(r)
        fusion.end_call(cid)
        order = {Band.LOW: 0, Band.ELEVATED: 1, Band.HIGH: 2}
        top = max((al.band for al in sink.alerts), key=order.__getitem__, default=Band.LOW)
        bands[top.value] += 1
    return {"watchlist_size": size, "calls": sum(bands.values()), "highest_band": bands}


def format_text(r: dict[str, Any]) -> str:
    lines = [
        f"{r['model']}: known_fraudster on 8 kHz G.711 speech ({r['speech_dir']})",
        f"  enrolment >= {r['enrol_net_speech_s']} s net speech (its own files); probe and "
        f"impostor calls: utterances of one speaker back to back, searched once at "
        f"{r['min_net_speech_s']} s net speech; {r['folds']} folds; target per-call "
        f"false-match {100 * r['target_rate']:.2f} %",
        f"  speakers outside the cohort: {r['pool_speakers']} listable (enrolment + probe), "
        f"{r['impostor_call_clips']} impostor-capable calls; per dataset "
        "(speakers/listable/callers/calls): "
        + ", ".join(
            f"{d} {a['speakers']}/{a['targets']}/{a['callers']}/{a['calls']}"
            for d, a in r["availability"].items()
        ),
        f"  cohort {r['cohort_utterances']} utterances; S-normed impostor mean "
        f"{r['calibration']['mean']}, sd {r['calibration']['sd']}",
        f"  S-norm top-{r['calibration']['top_k']} cohort; impostor tail: "
        f"{100 * r['calibration']['tail_share']:.0f} % above {r['calibration']['tail_u']}, "
        f"mean excess {r['calibration']['tail_beta']}",
        "  size  entries(real/speed/mix)  thr   false matches         upper95 spk/calls  "
        "hits (speakers)    [own pseudo competing]  thr needed  hits then | Gaussian thr: "
        "false matches, hits",
    ]
    for n, s in r["sizes"].items():
        e = s["entries"]
        lines.append(
            f"  {n:>5}  {e.get('real', 0):>4}/{e.get('speed', 0):>4}/{e.get('mixture', 0):>4}"
            f"       {s['threshold_snorm']:5.2f} {s['false_matches']:>4}/{s['impostor_calls']:<6}"
            f"({100 * s['false_match_rate']:.2f} %)  "
            f"{100 * s['false_match_upper95_by_speakers']:5.1f}/"
            f"{100 * s['false_match_upper95_by_calls']:.2f} %"
            f"  {s['hits']:>4}/{s['target_calls']:<5} ({100 * s['hit_rate']:.1f} %, "
            f"{s['target_speakers']}) [{100 * s['hit_rate_own_pseudo_competing']:.1f} %]"
            f"  {s['threshold_needed_on_this_data']:6.2f}  {100 * s['hit_rate_at_needed']:.1f} %"
            f" | {s['gaussian_threshold_snorm']:.2f}: {s['false_matches_at_gaussian']}, "
            f"{100 * s['hit_rate_at_gaussian']:.1f} %"
        )
    v = r["voice_mismatch"]
    lines.append(
        f"  voice_mismatch (claimed account, final aggregate >= {v['policy_threshold']}): genuine "
        f"flagged {100 * v['genuine_flagged_rate']:.1f} % of {v['genuine_calls']}, impostor "
        f"flagged {100 * v['impostor_flagged_rate']:.1f} % of {v['impostor_calls']}"
    )
    h = r["handoff"]
    lines.append(
        f"  handoff (owner then another speaker, {h['watchlist_size']}-entry watchlist): "
        f"highest band {h['highest_band']} over {h['calls']} calls"
    )
    return "\n".join(lines)
