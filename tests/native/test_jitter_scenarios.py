"""Table-driven jitter-buffer scenarios in virtual time (after pjmedia's Jbtest.dat and
NetEQ's simulated-clock tests): every case feeds a packet schedule, pulls a frame every
20 ms, and checks counters, frame flags and the audio that came out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from native.codec import build_rtp, ulaw_encode
from native.jitter import FrameFlag, PacketOutcome
from native.sim import Packet, g711_stream, simulate
from tests.native.jb_helpers import (
    MS,
    assert_positions_advance,
    fixed_delay,
    flags,
    g711_roundtrip,
    new_jb,
    real_audio,
    tone,
)

SECONDS = 4.0
PCM = tone(SECONDS)
REF = g711_roundtrip(PCM)
PACKETS = g711_stream(PCM)
N = len(PACKETS)
END = int((SECONDS + 1.0) * 1000) * MS

Schedule = list[tuple[int, int, bytes]]


@dataclass(frozen=True)
class Case:
    name: str
    schedule: Callable[[], Schedule]
    stats: dict[str, int] = field(default_factory=dict)  # exact counter values
    complete: bool = True  # every sample of the source comes out, in order
    concealed_frames: int | tuple[int, int] | None = None  # CONCEALED frames (or range)


def ideal() -> Schedule:
    return fixed_delay(PACKETS)


def duplicates() -> Schedule:
    return fixed_delay(PACKETS) + [(p.send_ns + 7 * MS, p.index + N, p.datagram) for p in PACKETS]


def reordered_pairs() -> Schedule:
    out = []
    for p in PACKETS:
        swap = 25 * MS if p.index % 2 == 0 and p.index + 1 < N else 0
        out.append((p.send_ns + 5 * MS + swap, p.index, p.datagram))
    return out


def drop(indices: set[int]) -> Callable[[], Schedule]:
    return lambda: [a for a in fixed_delay(PACKETS) if a[1] not in indices]


def late_one() -> Schedule:
    return [(a[0] + (900 * MS if a[1] == 60 else 0), a[1], a[2]) for a in fixed_delay(PACKETS)]


def restamped(seq0: int = 1000, ts0: int = 160_000) -> Callable[[], Schedule]:
    return lambda: fixed_delay(g711_stream(PCM, seq0=seq0, ts0=ts0))


def multi_frame(ptime_ms: int) -> Callable[[], Schedule]:
    return lambda: fixed_delay(g711_stream(PCM, ptime_ms=ptime_ms))


def switch_at(half: int, **second: int) -> Callable[[], Schedule]:
    """First half as PACKETS; the rest re-stamped with the given header fields."""

    def build() -> Schedule:
        out = fixed_delay(PACKETS[:half])
        payload = ulaw_encode(PCM)
        for p in PACKETS[half:]:
            seq = (second.get("seq0", p.seq) + (p.index - half if "seq0" in second else 0)) & 0xFFFF
            ts = second.get("ts0", p.ts) + (p.index - half) * 160 if "ts0" in second else p.ts
            datagram = build_rtp(
                payload[p.index * 160 : (p.index + 1) * 160],
                seq=seq,
                ts=ts & 0xFFFFFFFF,
                ssrc=second.get("ssrc", 0x1234ABCD),
                payload_type=second.get("pt", 0),
            )
            out.append((p.send_ns + 5 * MS, p.index, datagram))
        return out

    return build


def pcma_second_half() -> Schedule:
    from native.codec import alaw_encode

    out = fixed_delay(PACKETS[: N // 2])
    payload = alaw_encode(PCM)
    for p in PACKETS[N // 2 :]:
        datagram = build_rtp(
            payload[p.index * 160 : (p.index + 1) * 160],
            seq=p.seq,
            ts=p.ts,
            ssrc=0x1234ABCD,
            payload_type=8,
        )
        out.append((p.send_ns + 5 * MS, p.index, datagram))
    return out


CASES = [
    Case(
        "ideal",
        ideal,
        {"packets_played": N, "concealment_events": 0, "packets_lost": 0},
        concealed_frames=0,
    ),
    Case(
        "every packet twice",
        duplicates,
        {"packets_duplicate": N, "packets_played": N},
        concealed_frames=0,
    ),
    Case(
        "adjacent pairs swapped",
        reordered_pairs,
        {"packets_reordered": N // 2, "packets_played": N, "packets_late": 0},
        concealed_frames=0,
    ),
    Case(
        "seq wrap at 65535",
        restamped(seq0=65500),
        {"packets_played": N, "restarts": 0, "packets_lost": 0, "ext_highest_seq": 65500 + N - 1},
    ),
    Case(
        "ts wrap at 2^32",
        restamped(ts0=0xFFFFFF00),
        {"packets_played": N, "resyncs": 0, "packets_late": 0},
        concealed_frames=0,
    ),
    Case("60 ms packets", multi_frame(60), {"packets_played": len(PCM) // 480}, concealed_frames=0),
    Case("10 ms packets", multi_frame(10), {"packets_played": len(PCM) // 80}, concealed_frames=0),
    Case(
        "single loss",
        drop({50}),
        {
            "packets_lost": 1,
            "concealment_events": 1,
            "concealed_samples": 160,
            "interruption_count": 0,
        },
        complete=False,
        concealed_frames=1,
    ),
    # Concealment covers the hole; when the audio behind it arrives the playout point may
    # skip the rest of the hole to return to target, so 8 to 10 frames are concealed.
    Case(
        "burst loss of 10",
        drop(set(range(50, 60))),
        {"packets_lost": 10, "concealment_events": 1, "interruption_count": 1},
        complete=False,
        concealed_frames=(8, 10),
    ),
    Case(
        "one packet 900 ms late",
        late_one,
        {"packets_late": 1, "packets_played": N - 1},
        complete=False,
        concealed_frames=1,
    ),
    Case(
        "SSRC switch mid-call",
        switch_at(N // 2, ssrc=0xBEEF, seq0=7, ts0=999),
        {"ssrc_changes": 1, "packets_played": N, "packets_late": 0, "packets_lost": 0},
    ),
    Case(
        "seq restart (jump confirmed by a second packet)",
        switch_at(N // 2, seq0=30000),
        {"restarts": 1, "packets_jump": 1, "packets_played": N - 1},
        complete=False,
    ),
    Case("PCMU to PCMA", pcma_second_half, {"payload_type_changes": 1, "packets_played": N}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_scenario(case: Case) -> None:
    jb = new_jb()
    result = simulate(jb, case.schedule(), until_ns=END, stop_when_drained=True)
    stats = jb.stats()
    for key, want in case.stats.items():
        assert stats[key] == want, f"{key}: {stats[key]} != {want}"
    assert len(result.frames) == len(result.pull_times)  # one frame per pull, never a stall
    assert_positions_advance(result)
    out = real_audio(result)
    if case.complete:
        if case.name == "PCMU to PCMA":
            from native.codec import alaw_decode, alaw_encode

            half = (N // 2) * 160
            expect = np.concatenate([REF[:half], alaw_decode(alaw_encode(PCM))[half:]])
        else:
            expect = REF[: len(out)]
        assert len(out) == len(expect)
        assert np.array_equal(out, expect)
    if case.concealed_frames is not None:
        last_real = max(i for i, f in enumerate(result.frames) if f.real_mask)
        before_end = Counter(flags(result)[: last_real + 1])
        lo, hi = (
            (case.concealed_frames,) * 2
            if isinstance(case.concealed_frames, int)
            else (case.concealed_frames)
        )
        assert lo <= before_end[FrameFlag.CONCEALED] <= hi


def test_loss_never_stalls_output() -> None:
    """The aiortc#543 failure: after one lost packet, output must carry on in time."""
    jb = new_jb()
    result = simulate(jb, drop({40})(), until_ns=END)
    conceal_at = [i for i, f in enumerate(result.frames) if f.flag == FrameFlag.CONCEALED]
    first = conceal_at[0]
    # the frame right after the concealed one is real audio again, not a growing backlog
    assert result.frames[first + 1].flag == FrameFlag.NORMAL
    assert result.frames[first + 1].pos == result.frames[first].pos + 8
    waits = jb.wait_histogram()
    assert waits.sum() == N - 1
    # buffer wait did not grow after the loss: every packet waited under 200 ms
    assert waits[200:].sum() == 0


def test_not_started_until_first_packet_and_start_delay() -> None:
    jb = new_jb(start_delay_ms=100)
    schedule = [(a[0] + 300 * MS, a[1], a[2]) for a in ideal()]
    result = simulate(jb, schedule, until_ns=1000 * MS)
    first_audio = next(i for i, f in enumerate(result.frames) if f.flag != FrameFlag.NOT_STARTED)
    assert all(f.pos == -1 for f in result.frames[:first_audio])
    # first packet at 305 ms + 100 ms start delay: the first frame is pulled at 420 ms
    assert result.pull_times[first_audio] == 420 * MS
    assert result.frames[first_audio].flag == FrameFlag.NORMAL


def test_dtx_with_comfort_noise_is_not_loss() -> None:
    """Talk, CN packet, 2 s of nothing (timestamps run on), talk again."""
    first = g711_stream(PCM[:8000])  # 1 s
    gap_packets = 100  # 2 s
    second = g711_stream(
        PCM[8000:16000],
        seq0=1000 + len(first) + 1,
        ts0=160_000 + (len(first) + gap_packets) * 160,
        start_ns=(len(first) + gap_packets) * 20 * MS,
    )
    cn = build_rtp(
        bytes([40]),
        seq=1000 + len(first),
        ts=160_000 + len(first) * 160,
        ssrc=0x1234ABCD,
        payload_type=13,
    )
    schedule = [*fixed_delay(first), (len(first) * 20 * MS + 5 * MS, 10000, cn)]
    schedule += [(p.send_ns + 5 * MS, 20_000 + p.index, p.datagram) for p in second]
    jb = new_jb()
    result = simulate(jb, schedule, until_ns=4500 * MS)
    stats = jb.stats()
    assert stats["packets_cn"] == 1
    # nothing concealed between the first CNG frame and the last real frame: the gap is
    # silence (the underrun after the second talkspurt ends is not part of it)
    assert _first_concealed(result) > _last_real(result)
    assert stats["cng_samples"] >= 90 * 160
    assert stats["packets_played"] == len(first) + len(second)
    assert stats["packets_late"] == 0
    gap_flags = Counter(f.flag for f in result.frames[_first_cng(result) : _last_real(result)])
    assert gap_flags[FrameFlag.CONCEALED] == 0


def test_silence_suppression_without_cn_resyncs() -> None:
    """A sender that just stops (no CN) and resumes 3 s later with the timestamp jump."""
    first = g711_stream(PCM[:8000])
    second = g711_stream(
        PCM[8000:16000], seq0=1000 + len(first), ts0=160_000 + 200 * 160, start_ns=200 * 20 * MS
    )
    jb = new_jb()
    result = simulate(jb, fixed_delay(first) + fixed_delay(second), until_ns=5400 * MS)
    stats = jb.stats()
    assert stats["packets_played"] == len(first) + len(second)
    assert stats["packets_late"] == 0
    assert np.array_equal(real_audio(result), REF[:16000])
    # after the resume the delay is back near the target, not the length of the silence
    resumed = [f for f in result.frames if f.real_mask][len(first) + 5]
    assert resumed.buffer_level_ms <= resumed.target_delay_ms + 40


def test_ptime_change_20_60_10() -> None:
    payload = ulaw_encode(PCM)
    out: list[tuple[int, int, bytes]] = []
    pos, seq, i = 0, 500, 0
    for ptime in [20] * 50 + [60] * 20 + [10] * 100:
        n = ptime * 8
        if pos + n > len(payload):
            break
        out.append(
            (
                pos * 125_000 + 5 * MS,
                i,
                build_rtp(payload[pos : pos + n], seq=seq, ts=1000 + pos, ssrc=9),
            )
        )
        pos, seq, i = pos + n, seq + 1, i + 1
    jb = new_jb()
    result = simulate(jb, out, until_ns=END)
    stats = jb.stats()
    assert stats["ptime_changes"] == 2
    assert stats["packets_played"] == len(out)
    assert np.array_equal(real_audio(result), REF[:pos])


def test_overflow_flushes_to_target_and_stays_bounded() -> None:
    """A network stall mid-call releases 5 s of packets at once (more than the ring)."""
    schedule = [
        (6005 * MS if 50 <= a[1] < 300 else a[0], a[1], a[2])
        for a in fixed_delay(g711_stream(tone(8.0)))
    ]
    jb = new_jb()
    result = simulate(jb, schedule, until_ns=9000 * MS)
    stats = jb.stats()
    assert stats["flushes"] >= 1
    assert stats["packets_flushed"] > 0
    accepted = stats["packets_received"] - stats["packets_late"] - stats["packets_duplicate"]
    assert accepted == stats["packets_played"] + stats["packets_flushed"] + stats["packets_dropped"]
    capacity_ms = 2560
    assert max(f.buffer_level_ms for f in result.frames) <= capacity_ms
    # the stall taught the estimator a long delay; the buffer stays within its ceiling
    assert result.frames[-20].buffer_level_ms <= 400 + 60
    assert_positions_advance(result)


@pytest.mark.parametrize("ratio", [1.001, 0.999], ids=["sender +0.1%", "sender -0.1%"])
def test_clock_drift_for_an_hour(ratio: float) -> None:
    """An hour of virtual time with the sender's clock off by 0.1 %: the buffer neither
    grows without bound nor starves; the mismatch is absorbed by whole-frame drops or
    insertions (about one per 20 s), not by flushes or late packets."""
    seconds = 3600
    frame = ulaw_encode(tone(0.02))
    jb = new_jb()
    period = 20 * MS / ratio
    send = 0.0
    seq, ts = 0, 0
    t = 0
    levels = []
    for _ in range(int(seconds * 50 * min(ratio, 1.0))):
        arrival = int(send) + 5 * MS
        while t < arrival:
            f = jb.pull(t)
            levels.append(f.buffer_level_ms)
            t += 20 * MS
        jb.insert(build_rtp(frame, seq=seq & 0xFFFF, ts=ts & 0xFFFFFFFF, ssrc=1), arrival)
        seq, ts, send = seq + 1, ts + 160, send + period
    stats = jb.stats()
    assert stats["flushes"] == 0
    assert stats["packets_late"] == 0
    assert stats["packets_lost"] == 0
    tail = levels[len(levels) // 2 :]
    assert max(tail) <= 400  # bounded by the ceiling
    if ratio > 1:
        assert stats["removed_samples_for_acceleration"] >= 100 * 160
        assert stats["inserted_samples_for_deceleration"] <= 10 * 160
    else:
        assert stats["inserted_samples_for_deceleration"] + stats["concealed_samples"] >= 100 * 160
        assert stats["removed_samples_for_acceleration"] <= 10 * 160
        assert stats["concealment_events"] <= 5


def test_jitter_raises_the_target_and_keeps_late_packets_rare() -> None:
    rng = np.random.default_rng(7)
    delays = rng.gamma(2.0, 15.0, N) * MS  # mean 30 ms, long tail
    schedule = [
        (p.send_ns + int(d), p.index, p.datagram) for p, d in zip(PACKETS, delays, strict=True)
    ]
    jb = new_jb()
    result = simulate(jb, schedule, until_ns=END)
    stats = jb.stats()
    assert stats["target_delay_ms"] > 40
    assert stats["packets_late"] <= N * 0.02
    assert Counter(flags(result))[FrameFlag.NORMAL] >= N * 0.9


def test_steady_jitter_stays_below_ceiling() -> None:
    jb = new_jb(max_delay_ms=120)
    delays = np.random.default_rng(3).uniform(0, 300, N) * MS
    schedule = [
        (p.send_ns + int(d), p.index, p.datagram) for p, d in zip(PACKETS, delays, strict=True)
    ]
    simulate(jb, schedule, until_ns=END)
    assert jb.stats()["target_delay_ms"] == 120


def test_pause_discards_audio_and_is_not_loss() -> None:
    jb = new_jb()
    schedule = sorted(fixed_delay(PACKETS), key=lambda a: a[0])
    frames = []
    k = 0
    for step in range(int(SECONDS * 50) + 20):
        t = step * 20 * MS
        if step == 50:
            jb.set_paused(True)
        if step == 100:
            jb.set_paused(False)
        while k < len(schedule) and schedule[k][0] <= t:
            outcome = jb.insert(schedule[k][2], schedule[k][0])
            if 52 <= step < 100:
                assert outcome == PacketOutcome.PAUSED
            k += 1
        frames.append(jb.pull(t))
    stats = jb.stats()
    assert all(f.flag == FrameFlag.PAUSED for f in frames[50:100])
    assert stats["packets_paused"] >= 48
    assert stats["packets_lost"] == 0
    assert stats["concealment_events"] <= 1  # only the tail after the stream ends
    assert sum(1 for f in frames[100:] if f.flag == FrameFlag.NORMAL) >= 90


def test_dtmf_events_are_deduplicated_and_digits_withheld() -> None:
    def event(digit: int, ts: int, seq: int, duration: int, end: bool) -> bytes:
        payload = bytes([digit, (0x80 if end else 0) | 10, duration >> 8, duration & 0xFF])
        return build_rtp(payload, seq=seq, ts=ts, ssrc=0x1234ABCD, payload_type=101)

    def run(key: int) -> list[int]:
        from native.jitter import JitterBuffer, JitterConfig

        jb = JitterBuffer(JitterConfig(dtmf_key=key))
        jb.insert(PACKETS[0].datagram, 0)
        seq = 2000
        for n, digit in enumerate([5, 5, 9]):
            ts = 200_000 + n * 4000
            for d in (160, 320, 640):
                assert jb.insert(event(digit, ts, seq, d, False), n * 10**9) == PacketOutcome.DTMF
                seq += 1
            for _ in range(3):  # the end packet, sent three times
                jb.insert(event(digit, ts, seq, 800, True), n * 10**9 + 1)
                seq += 1
        events = jb.take_dtmf()
        assert len(events) == 3
        assert all(e.ended and e.duration_ms == 100 and e.volume == 10 for e in events)
        assert jb.stats()["dtmf_events"] == 3
        assert jb.stats()["packets_played"] == 0
        return [e.token for e in events]

    tokens = run(1)
    assert tokens[0] == tokens[1] != tokens[2]  # "same key again" is visible
    # across calls the tokens are unrelated: over many keys, digit 5 maps to many tokens
    assert len({run(k)[0] for k in range(2, 40)}) > 5


def test_unknown_payload_type_and_bad_payload_are_counted() -> None:
    jb = new_jb()
    assert jb.insert(build_rtp(b"\x00" * 160, seq=1, ts=0, ssrc=1, payload_type=96), 0) == (
        PacketOutcome.UNKNOWN_PT
    )
    assert jb.insert(build_rtp(b"\x00" * 161, seq=2, ts=160, ssrc=1), 0) == (
        PacketOutcome.BAD_PAYLOAD
    )
    assert jb.insert(b"\x80\x00\x00", 0) == PacketOutcome.MALFORMED
    stats = jb.stats()
    assert stats["packets_unknown_pt"] == 1
    assert stats["packets_bad_payload"] == 1


def _first_cng(result: object) -> int:
    return next(i for i, f in enumerate(result.frames) if f.flag == FrameFlag.CNG)  # type: ignore[attr-defined]


def _last_real(result: object) -> int:
    return max(i for i, f in enumerate(result.frames) if f.real_mask)  # type: ignore[attr-defined]


def _first_concealed(result: object) -> int:
    return next(
        (i for i, f in enumerate(result.frames) if f.flag == FrameFlag.CONCEALED),  # type: ignore[attr-defined]
        10**9,
    )


def _unused(p: Packet) -> None:  # keeps the import used for type readers
    del p


def test_regular_arrival_bursts_raise_the_target_and_lose_nothing() -> None:
    """Packets arrive five at a time every 100 ms (a sender or SBC that batches): the
    buffer must learn a delay that covers the burst period and then play everything."""
    schedule = [((p.index // 5 + 1) * 100 * MS, p.index, p.datagram) for p in PACKETS]
    jb = new_jb()
    result = simulate(jb, schedule, until_ns=END, stop_when_drained=True)
    stats = jb.stats()
    assert stats["target_delay_ms"] >= 100
    # before the estimator has seen a burst period a few packets may come too late;
    # after it has, none do
    assert stats["packets_late"] <= 5
    late_after_first_second = [
        i for i, o in result.outcomes.items() if o == PacketOutcome.LATE and i >= 50
    ]
    assert late_after_first_second == []
    assert_positions_advance(result)


def test_burst_at_start_is_played_then_the_delay_comes_down() -> None:
    """A second of audio queued before answer arrives at once (pjmedia's 'PUT burst at
    start'): nothing is late, and the delay returns to the target's neighbourhood."""
    schedule = [(max(a[0], 1000 * MS), a[1], a[2]) for a in fixed_delay(PACKETS)]
    jb = new_jb()
    result = simulate(jb, schedule, until_ns=END, stop_when_drained=True)
    stats = jb.stats()
    assert stats["packets_late"] == 0
    assert stats["packets_flushed"] == 0
    accepted = stats["packets_played"] + stats["packets_dropped"]
    assert accepted == N
    tail = [f for f in result.frames if f.real_mask][-20]
    assert tail.buffer_level_ms <= 2 * tail.target_delay_ms + 100
