"""dtmf_behaviour features and scores (issue 6): structural only, per-call keyed hashes."""

from __future__ import annotations

import random

from detectors.alert_schema import Dimension
from detectors.contract import WindowResult
from detectors.dtmf.behaviour import KIND_DIGIT, KIND_NAV, DtmfCall

S = 1_000_000_000


def _type(
    call: DtmfCall,
    entries: list[str],
    at: float,
    rng: random.Random,
    gap_s: float,
    step: float | None = None,
) -> tuple[list[WindowResult], float]:
    """Enter each string (test tokens: the digit's value; the bridge's are keyed), with
    human timing unless ``step`` gives a fixed start-to-start interval; ``gap_s``
    between entries. Returns the results and the time after the last entry."""
    out: list[WindowResult] = []
    for entry in entries:
        for ch in entry:
            kind = KIND_NAV if ch in "*#" else KIND_DIGIT
            token = 10 if ch == "*" else 11 if ch == "#" else int(ch)
            r = call.press(int(at * S), token, kind)
            if r is not None:
                out.append(r)
            at += step if step is not None else rng.uniform(0.25, 0.8)
        at += gap_s
        r = call.flush(int(at * S))
        if r is not None:
            out.append(r)
    return out, at


def test_a_customer_entering_an_account_number_and_a_pin_scores_low() -> None:
    rng = random.Random(1)
    call = DtmfCall("c1", "caller", 0)
    results, _ = _type(call, ["4711830925", "2580"], 3.0, rng, gap_s=6.0)
    assert len(results) == 2  # one result per completed entry
    assert all(r.dimension is Dimension.DTMF_BEHAVIOUR for r in results)
    assert max(r.score or 0.0 for r in results) < 0.2, [r.reasons for r in results]
    # a PIN retyped after a typo still stays low
    more, _ = _type(call, ["2508", "2580"], 30.0, rng, gap_s=5.0)
    assert max(r.score or 0.0 for r in more) < 0.5, [r.reasons for r in more]


def test_twelve_different_pins_in_ninety_seconds_score_high() -> None:
    rng = random.Random(2)
    call = DtmfCall("c2", "caller", 0)
    pins = [f"{rng.randrange(10_000):04d}" for _ in range(12)]
    assert len(set(pins)) == 12
    results, end = _type(call, pins, 2.0, rng, gap_s=5.0)
    assert end - 2.0 < 90.0
    last = results[-1]
    assert last.score is not None and last.score >= 0.8
    assert any("12 distinct 4-digit entries" in why for why in last.reasons), last.reasons
    text = " ".join(why for r in results for why in r.reasons)
    assert not any(pin in text for pin in pins)  # counts and timings, never the digits
    # early entries (the first two or three) were not yet suspicious
    assert results[1].score is not None and results[1].score < 0.5


def test_the_same_pin_retyped_is_not_guessing() -> None:
    rng = random.Random(3)
    call = DtmfCall("c3", "caller", 0)
    results, _ = _type(call, ["1234"] * 12, 2.0, rng, gap_s=5.0)
    assert results[-1].score is not None and results[-1].score < 0.2
    assert call.features().max_same_length_distinct == 1


def test_machine_regular_timing_is_elevated_and_machine_fast_more() -> None:
    rng = random.Random(4)
    regular = DtmfCall("c4", "caller", 0)
    results, _ = _type(regular, ["502113", "88"], 1.0, rng, gap_s=4.0, step=0.2)
    results += _type(regular, ["730012"], 20.0, rng, gap_s=4.0, step=0.2)[0]
    score = results[-1].score or 0.0
    assert 0.5 <= score < 0.8, results[-1].reasons
    assert any("machine-regular" in why for why in results[-1].reasons)

    fast = DtmfCall("c5", "caller", 0)
    results, _ = _type(fast, ["502113", "730012"], 1.0, rng, gap_s=4.0, step=0.09)
    assert (results[-1].score or 0.0) >= 0.8, results[-1].reasons
    assert any("machine-fast" in why for why in results[-1].reasons)

    human = DtmfCall("c6", "caller", 0)
    results, _ = _type(human, ["502113", "730012"], 1.0, rng, gap_s=4.0)
    assert (results[-1].score or 0.0) < 0.2, results[-1].reasons


def test_menu_tree_probing_scores_high() -> None:
    rng = random.Random(5)
    call = DtmfCall("c7", "caller", 0)
    menu = ["1", "*", "2", "3#", "*", "9", "0", "4#", "*", "7", "5", "8#", "*", "6", "2", "1#"]
    results, _ = _type(call, menu, 2.0, rng, gap_s=2.5)
    f = call.features()
    assert f.nav_keys >= 8 and f.short_entries >= 10
    assert (results[-1].score or 0.0) >= 0.5, results[-1].reasons
    assert any("menu probing" in why for why in results[-1].reasons)
    # one menu choice and an account number: low
    quiet = DtmfCall("c8", "caller", 0)
    results, _ = _type(quiet, ["2", "4711830925#"], 2.0, rng, gap_s=3.0)
    assert max(r.score or 0.0 for r in results) < 0.2


def test_no_key_presses_no_result_and_entries_need_a_pause() -> None:
    call = DtmfCall("c9", "caller", 0)
    assert call.flush(100 * S) is None
    assert call.press(1 * S, 5, KIND_DIGIT) is None
    assert call.flush(int(2.5 * S)) is None  # 1.5 s: still the same entry
    r = call.flush(int(3.1 * S))
    assert r is not None and r.key.start_s == 1.0
    call.wipe()
    assert call.features().entries == 0


def test_entries_are_compared_by_a_per_call_keyed_hash() -> None:
    a, b = DtmfCall("a", "caller", 0), DtmfCall("b", "caller", 0)
    for call in (a, b):
        for k, tok in enumerate((1, 2, 3, 4)):
            call.press(k * S // 2, tok, KIND_DIGIT)
        call.flush(10 * S)
    (ea,), (eb,) = a._entries, b._entries
    assert ea.length == eb.length == 4
    assert ea.digest != eb.digest  # the same entry hashes differently on another call
    assert bytes((1, 2, 3, 4)) not in ea.digest
