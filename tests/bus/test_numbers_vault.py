"""Phone numbers at rest (issue 11): sealed with AES-GCM bound to the call id, and a
keyed hash of the ANI for counting; the key from a secret spec or a 0600 state file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from detectors.bus.numbers import NumberVault, load_vault, normalise
from detectors.bus.settings import BusSettings

KEY = bytes(range(32))


def test_seal_and_open_round_trip_bound_to_the_call() -> None:
    v = NumberVault(KEY)
    n = v.seal("call_1", "+44 20 7123 4567", "+1 (415) 555-0123")
    assert "4567" not in n.sealed and "0123" not in n.sealed
    assert v.open("call_1", n.sealed) == {"ani": "+44 20 7123 4567", "dnis": "+1 (415) 555-0123"}
    with pytest.raises(ValueError):
        v.open("call_2", n.sealed)  # moved to another call: refused
    with pytest.raises(ValueError):
        NumberVault(bytes(32)).open("call_1", n.sealed)  # another deployment's key
    tampered = n.sealed[:-2] + ("A" if n.sealed[-2] != "A" else "B") + n.sealed[-1]
    with pytest.raises(ValueError):
        v.open("call_1", tampered)
    assert (
        v.seal("call_1", "+442071234567", "").sealed != v.seal("call_1", "+442071234567", "").sealed
    )


def test_ani_hash_is_keyed_and_spelling_blind() -> None:
    v, other = NumberVault(KEY), NumberVault(bytes(32))
    assert v.ani_hash("+44 20 7123 4567") == v.ani_hash("+442071234567")
    assert v.ani_hash("+442071234567") != v.ani_hash("+442071234568")
    assert v.ani_hash("+442071234567") != other.ani_hash("+442071234567")
    assert len(v.ani_hash("+442071234567")) == 32 and v.ani_hash("anonymous") == ""
    assert normalise("tel:+1-415-555-0123;ext=9") == "+141555501239"


def test_key_from_spec_or_a_private_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_vault(BusSettings(state_dir=tmp_path / "s"))
    path = tmp_path / "s" / "numbers.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    sealed = first.seal("c", "+15550100", "").sealed
    assert load_vault(BusSettings(state_dir=tmp_path / "s")).open("c", sealed)["ani"] == "+15550100"
    monkeypatch.setenv("CS_TEST_NUMBERS_KEY", path.read_text().strip())
    from_env = load_vault(
        BusSettings(state_dir=tmp_path / "x", numbers_key="env:CS_TEST_NUMBERS_KEY")
    )  # type: ignore[arg-type]
    assert from_env.open("c", sealed)["ani"] == "+15550100"
    assert not (tmp_path / "x").exists()  # a configured key never creates a file
    monkeypatch.setenv("CS_TEST_NUMBERS_KEY", "too-short")
    with pytest.raises(ValueError, match="32 bytes"):
        load_vault(BusSettings(numbers_key="env:CS_TEST_NUMBERS_KEY"))  # type: ignore[arg-type]
