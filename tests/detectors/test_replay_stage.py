"""The replay stage on real speech, through the real fingerprinter and in-process shared
state: a recording heard on one call and played into another scores as a replay, as
does audio repeated within a call; genuine, different speech does not; allowlisted
audio abstains for replay and for synthetic_voice (whose result waits for the replay
window covering it); audio heard from many distinct ANIs is proposed once as a
candidate; an internal leg's fingerprint is never used."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.replay.detector import NAME, ReplayFingerprinter
from detectors.replay.fingerprint import RATE, fingerprint
from detectors.replay.index import Clip
from detectors.replay.shared_state import MemoryReplayState
from detectors.replay.stage import ReplayConfig, ReplayStage
from native.codec import ulaw_decode, ulaw_encode

F32 = npt.NDArray[np.float32]
DET = ReplayFingerprinter()
WIN, HOP = DET.spec.window, DET.spec.hop


@pytest.fixture(scope="module")
def prompts(prompt_utterances: list[F32]) -> list[F32]:
    """Real 8 kHz utterances, each at least 2 s."""
    return prompt_utterances


def _speech(prompts: list[F32], first: int, seconds: float) -> F32:
    need = int(seconds * RATE)
    out = np.concatenate(prompts[first : first + 12])[:need]
    assert out.size == need
    return out


def _g711(x: F32, gain: float = 0.7, delay: int = 0) -> F32:
    y = np.concatenate([np.zeros(delay, np.float32), x]) * gain
    pcm = np.clip(y * 32768, -32768, 32767).astype(np.int16)
    return ulaw_decode(ulaw_encode(pcm)).astype(np.float32) / 32768.0


def _windows(
    call: str, audio: F32, leg: str = "ext", role: LegRole = LegRole.EXTERNAL
) -> list[WindowResult]:
    out = []
    for end in range(WIN, audio.size + 1, HOP):
        window = np.ascontiguousarray(audio[end - WIN : end])
        emb = DET.run_batch(window[None, :]).embeddings
        assert emb is not None
        out.append(
            WindowResult(
                key=WindowKey(call, leg, role, (end - WIN) / RATE, end / RATE),
                detector=NAME,
                model_version="1",
                dimension=Dimension.REPLAY,
                provider="numpy",
                score=0.0,
                threshold=0.5,
                abstained=None,
                quality=WindowQuality(net_speech_s=3.0),
                embedding=emb[0],
            )
        )
    return out


class Wall:
    """Wall-clock seconds: each call starts at ``start``, a window is processed as its
    audio ends."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(
    stage: ReplayStage, results: list[WindowResult], wall: Wall | None = None, start: float = 0.0
) -> list[WindowResult]:
    out = []
    for r in results:
        if wall is not None:
            wall.now = start + r.key.end_s + 0.1
        out.extend(stage.process(r))
    return out


def _scores(results: list[WindowResult]) -> list[float]:
    return [r.score for r in results if r.score is not None]


def test_a_recording_played_into_another_call_is_a_replay(prompts: list[F32]) -> None:
    wall = Wall()
    state = MemoryReplayState(clock=wall)
    stage = ReplayStage(state, wall=wall)
    recording = _speech(prompts, 0, 10.0)
    for call in ("first", "replayed", "genuine", "together"):
        stage.open_call(call)
    first = _run(stage, _windows("first", recording), wall, 1000.0)
    assert max(_scores(first)) == 0.0  # nothing heard before
    state.settle()  # the refresher's round: published clips become searchable
    replayed = _run(stage, _windows("replayed", _g711(recording, 0.4, 333)), wall, 1060.0)
    genuine = _run(stage, _windows("genuine", _speech(prompts, 20, 10.0)), wall, 1080.0)
    # a call that heard the recording at the same moment as "first" did not replay it
    together = _run(stage, _windows("together", _g711(recording, 0.5)), wall, 1000.0)
    assert max(_scores(together)) == 0.0
    assert all(s >= 0.7 for s in _scores(replayed)), _scores(replayed)
    assert all(r.embedding is None for r in replayed)  # the fingerprint stays in the stage
    assert "the same audio on another call" in replayed[0].reasons[0]
    assert max(_scores(genuine)) == 0.0
    assert stage.stats.matched_cross == len(replayed)
    assert "60 s ago" in replayed[0].reasons[0]
    # the pair goes to the shared state once (the dashboard's related calls); the
    # reasons never name the other call
    assert state.take_relations() == [("replayed", "first")]
    assert state.stats.related == 1
    assert not any("first" in r for x in replayed for r in x.reasons)


def test_audio_repeated_within_a_call_is_a_replay(prompts: list[F32]) -> None:
    stage = ReplayStage(MemoryReplayState())
    stage.open_call("c")
    said = _speech(prompts, 30, 6.0)
    audio = np.concatenate([said, _speech(prompts, 45, 6.0), said])
    out = _run(stage, _windows("c", audio))
    scores = [(r.key.start_s, r.score or 0.0) for r in out]
    assert all(s == 0.0 for t, s in scores if t < 8.0), scores  # before the repeat
    late = [s for t, s in scores if t >= 12.0]
    assert late and min(late) >= 0.7, scores
    assert "earlier in this call" in out[-1].reasons[0]


def test_allowlisted_audio_abstains_for_replay_and_synthetic_voice(prompts: list[F32]) -> None:
    state = MemoryReplayState()
    prompt = _speech(prompts, 60, 8.0)
    state.set_allowlist("default", [Clip("al_1", fingerprint(prompt), "al_1", 0.0)])
    stage = ReplayStage(state)
    stage.open_call("c")
    audio = np.concatenate([_g711(prompt, 0.5, 80), _speech(prompts, 5, 8.0)])
    replay = _windows("c", audio)
    # a synthetic_voice window over the prompt arrives before the replay window covering it
    synth = [
        WindowResult(
            key=WindowKey("c", "ext", LegRole.EXTERNAL, start, start + 4.0),
            detector="aasist",
            model_version="1",
            dimension=Dimension.SYNTHETIC_VOICE,
            provider="cpu",
            score=0.95,
            threshold=0.5,
            abstained=None,
            quality=WindowQuality(net_speech_s=3.0),
        )
        for start in (2.0, 12.0)
    ]
    assert stage.process(synth[0]) == ()  # held until the leg's replay windows reach 6 s
    out = _run(stage, replay)
    released = [r for r in out if r.dimension is Dimension.SYNTHETIC_VOICE]
    assert [r.abstained for r in released] == [Abstention.ALLOWLISTED]
    (genuine_synth,) = stage.process(synth[1])  # over genuine speech: passes, scored
    assert genuine_synth.score == 0.95
    mine = [r for r in out if r.dimension is Dimension.REPLAY]
    over_prompt = [r for r in mine if r.key.end_s <= 8.0]
    assert over_prompt and all(r.abstained is Abstention.ALLOWLISTED for r in over_prompt)
    after = [r for r in mine if r.key.start_s >= 8.0]
    assert after and all(r.score == 0.0 for r in after)


def test_audio_on_many_distinct_anis_is_proposed_once(prompts: list[F32]) -> None:
    wall = Wall()
    state = MemoryReplayState(clock=wall)
    stage = ReplayStage(state, ReplayConfig(candidate_anis=5), wall=wall)
    announcement = _speech(prompts, 70, 6.0)
    for k in range(7):
        call = f"call-{k}"
        stage.open_call(call)
        stage.annotate(call, ani_hash=f"{k:032x}")
        _run(stage, _windows(call, _g711(announcement, 0.3 + 0.1 * k, 40 * k)), wall, 100.0 * k)
        state.settle()
        stage.end_call(call)
    _, proposals = state.take_pending()
    (cand,) = proposals
    assert cand.distinct_anis >= 5 and cand.status == "proposed"
    assert state.known_candidate("default", cand.cand_id)
    assert stage.stats.proposed == 1
    assert cand.frames >= 60  # enough of the audio to allowlist it when confirmed


def test_an_internal_legs_fingerprint_is_never_used(prompts: list[F32]) -> None:
    state = MemoryReplayState()
    stage = ReplayStage(state)
    stage.open_call("c")
    audio = _speech(prompts, 0, 8.0)
    out = _run(stage, _windows("c", audio, leg="agent", role=LegRole.INTERNAL))
    assert all(r.embedding is None for r in out)
    state.settle()
    assert len(state.recent()) == 0 and stage.stats.refused_leg == len(out)


def _synthetic(start: float, end: float, score: float = 0.95) -> WindowResult:
    return WindowResult(
        key=WindowKey("c", "ext", LegRole.EXTERNAL, start, end),
        detector="aasist",
        model_version="1",
        dimension=Dimension.SYNTHETIC_VOICE,
        provider="cpu",
        score=score,
        threshold=0.5,
        abstained=None,
        quality=WindowQuality(net_speech_s=3.0),
    )


def test_a_synthetic_window_just_past_the_replay_windows_is_judged_at_once(
    prompts: list[F32],
) -> None:
    """The AASIST window is 37.5 ms longer than the replay one: a synthetic_voice window
    ending that little past the leg's replay windows is judged then, not held a hop."""
    state = MemoryReplayState()
    prompt = _speech(prompts, 60, 8.0)
    state.set_allowlist("default", [Clip("al_1", fingerprint(prompt), "al_1", 0.0)])
    stage = ReplayStage(state)
    stage.open_call("c")
    audio = np.concatenate([_g711(prompt, 0.5, 80), _speech(prompts, 5, 8.0)])
    replay = _windows("c", audio)
    _run(stage, [r for r in replay if r.key.end_s <= 6.0])
    (over_prompt,) = stage.process(_synthetic(2.0375, 6.0375))
    assert over_prompt.abstained is Abstention.ALLOWLISTED
    assert stage.process(_synthetic(2.3, 6.3)) == ()  # past the slack: waits for replay
    released = [r for r in _run(stage, replay) if r.dimension is Dimension.SYNTHETIC_VOICE]
    assert [r.key.end_s for r in released] == [6.3]
