"""Impaired networks: the seeded relay (sip_bridge.impair) between a real sender and the
ingest, and the jitter buffer's counters checked against what the relay really did."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from rtp_call import FRAME, Leg, assert_exact, load_speech, run_realtime, wait_until

from native import lib
from native.ingest import Ingest
from sip_bridge.impair import Impairment, ImpairmentConfig, ImpairRelay, order_stats

NORMAL = lib.CS_FRAME_NORMAL
CONCEALED = lib.CS_FRAME_CONCEALED

# ---- the pure core ---------------------------------------------------------------------


def test_same_seed_same_plan_any_access_order() -> None:
    cfg = ImpairmentConfig(seed=3, loss=0.1, duplicate=0.1, reorder=0.1, jitter=0.01)
    plan = Impairment(cfg).plan(500)
    other = Impairment(cfg)
    assert [other.decide(i) for i in reversed(range(500))][::-1] == plan
    assert Impairment(ImpairmentConfig(seed=4, loss=0.1)).plan(500) != plan


def test_rates_follow_the_configuration() -> None:
    n = 20_000
    plan = Impairment(ImpairmentConfig(seed=1, loss=0.05, duplicate=0.03, reorder=0.02)).plan(n)
    assert abs(sum(d.lost for d in plan) / n - 0.05) < 0.01
    assert abs(sum(len(d.delays) == 2 for d in plan) / n - 0.03 * 0.95) < 0.01
    assert abs(sum(d.held for d in plan) / n - 0.02 * 0.95) < 0.01
    assert all(d.delays == (0.0,) or d.lost or d.held or len(d.delays) == 2 for d in plan)


def test_gilbert_elliott_losses_come_in_bursts() -> None:
    cfg = ImpairmentConfig(seed=2, burst_enter=0.02, burst_exit=0.25, burst_loss=1.0)
    lost = [d.lost for d in Impairment(cfg).plan(50_000)]
    runs = [len(list(g)) for k, g in itertools.groupby(lost) if k]
    mean_run = sum(runs) / len(runs)
    assert 3.0 < mean_run < 5.0  # geometric with mean 1 / burst_exit
    assert abs(sum(lost) / len(lost) - 0.02 / (0.02 + 0.25)) < 0.015  # stationary share


def test_jitter_distributions_are_bounded() -> None:
    uni = Impairment(ImpairmentConfig(seed=5, delay=0.01, jitter=0.004)).plan(2000)
    assert all(0.01 <= d.delays[0] <= 0.014 for d in uni)
    exp = Impairment(ImpairmentConfig(seed=5, jitter=0.002, jitter_dist="exponential")).plan(5000)
    firsts = np.array([d.delays[0] for d in exp])
    assert firsts.max() <= 0.02 and abs(firsts.mean() - 0.002) < 0.0003


def test_order_stats_classifies_like_a_receiver() -> None:
    # 0 1 3 2(reordered) 3(dup) 5 -> 4 lost
    assert order_stats([0, 1, 3, 2, 3, 5]) == {
        "sent": 6,
        "in_order": 4,
        "reordered": 1,
        "duplicates": 1,
        "lost": 1,
    }


def test_config_rejects_bad_probabilities() -> None:
    with pytest.raises(ValueError, match="loss must be within"):
        ImpairmentConfig(loss=1.5)


# ---- through real sockets into the ingest --------------------------------------------------


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> npt.NDArray[np.int16]:
    return load_speech(shared_dir, 3.0)


@pytest.fixture
def ingest() -> Iterator[Ingest]:
    with Ingest(4) as ing:
        yield ing


SCENARIOS = {
    "loss_reorder_dup_jitter": ImpairmentConfig(
        seed=11,
        loss=0.05,
        duplicate=0.05,
        reorder=0.06,
        reorder_delay=0.05,
        delay=0.002,
        jitter=0.006,
    ),
    "gilbert_elliott_bursts": ImpairmentConfig(
        seed=5,
        burst_enter=0.03,
        burst_exit=0.4,
        duplicate=0.02,
        jitter=0.004,
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_jitter_buffer_counters_match_the_relay(
    name: str, ingest: Ingest, speech: npt.NDArray[np.int16]
) -> None:
    cfg = SCENARIOS[name]
    leg = Leg(speech[: 120 * FRAME], ssrc=0xFEED)
    sid = ingest.add_stream(0, min_delay_ms=120, start_delay_ms=120, max_delay_ms=400)
    with ImpairRelay(cfg, forward=ingest.local_address(sid)) as relay:
        frames = run_realtime(ingest, leg.packets, lambda k: leg.send(k, relay.address))[sid]
        copies = sum(len(d.delays) for d in relay.model.plan(leg.packets))
        wait_until(lambda: ingest.stream_counters(sid)["datagrams"] == copies)
        sent_log = list(relay.sent_log)
        relay_counts = relay.counts()

    # the relay's own books: model decisions == what left the socket
    assert len(sent_log) == copies
    assert relay_counts["dropped"] == leg.packets - len(set(sent_log))
    assert relay_counts["duplicated"] == relay_counts["duplicates"]
    assert relay_counts["dropped"] > 0 and relay_counts["duplicates"] > 0

    # the first datagram(s) in arrival order fed the source lock's probation
    counters = ingest.stream_counters(sid)
    skipped = counters["srclock"]["probation_dropped"]
    inserted = sent_log[skipped:]
    want = order_stats(inserted)
    lost = max(inserted) - inserted[0] + 1 - len(set(inserted))
    st = ingest.stream_stats(sid)
    assert st["packets_late"] == 0
    assert st["packets_received"] == len(inserted)
    assert st["packets_duplicate"] == want["duplicates"]
    assert st["packets_reordered"] == want["reordered"]
    assert st["packets_in_order"] + st["packets_gap"] == want["in_order"]
    assert st["packets_lost"] == lost
    assert st["concealed_samples"] >= FRAME * lost - FRAME  # a loss at the very end may be unplayed
    assert st["concealment_events"] >= 1

    # output never stalls: after playout starts every pull returns a frame, and every
    # concealment run ends in NORMAL audio again within one frame of the longest loss run
    flags = [f.flag for f in frames]
    first = flags.index(NORMAL)
    assert set(flags[first:]) <= {NORMAL, CONCEALED}
    delivered = set(inserted)
    loss_runs = [
        len(list(g))
        for k, g in itertools.groupby(range(leg.packets), key=lambda i: i in delivered)
        if not k
    ]
    conceal_runs = [len(list(g)) for k, g in itertools.groupby(flags[first:]) if k == CONCEALED]
    assert conceal_runs and max(conceal_runs) <= max(loss_runs) + 1
    assert flags[-1] == NORMAL
    assert_exact(frames, leg, min_frames=leg.packets - lost - 15)
