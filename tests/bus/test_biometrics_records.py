"""Watchlist entries, enrolments and call updates as stored: a voiceprint that is not
base64 float32 of the declared size, not finite or not unit length is refused; an
entry needs a legal basis, a case reference and a later expiry; an enrolment needs a
consent reference; APIs never see the embedding."""

from __future__ import annotations

import math
import struct
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from detectors.bus.biometrics import (
    CallUpdate,
    Enrolment,
    WatchlistEntry,
    decode_embedding,
    encode_embedding,
    new_id,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def emb(values: list[float]) -> str:
    return encode_embedding(struct.pack(f"<{len(values)}f", *values))


UNIT8 = emb([1 / math.sqrt(8)] * 8)


def entry(**over: object) -> WatchlistEntry:
    fields: dict[str, object] = {
        "entry_id": new_id("wl"),
        "tenant": "bank",
        "label": "case 114 caller",
        "model": "speaker-resemblyzer-1.0.0+w300",
        "dim": 8,
        "embedding": UNIT8,
        "net_speech_s": 12.0,
        "source": "wav:caller.wav",
        "added_by": "ana",
        "created_at": NOW,
        "legal_basis": "GDPR art. 9(2)(f)",
        "case_ref": "FR-2025-114",
        "expires_at": NOW + timedelta(days=365),
    }
    fields.update(over)
    return WatchlistEntry.model_validate(fields)


def test_codec_round_trip_and_refusals() -> None:
    assert list(decode_embedding(UNIT8, 8)) == pytest.approx([1 / math.sqrt(8)] * 8)
    with pytest.raises(ValueError, match="32 bytes, expected 36"):
        decode_embedding(UNIT8, 9)
    with pytest.raises(ValueError, match="not L2-normalised"):
        decode_embedding(emb([1.0] * 8), 8)
    with pytest.raises(ValueError, match="non-finite"):
        decode_embedding(emb([math.nan] + [0.0] * 7), 8)
    with pytest.raises(ValueError, match="base64"):
        decode_embedding("***", 8)


def test_entry_rules() -> None:
    e = entry()
    assert "embedding" not in e.public() and e.public()["case_ref"] == "FR-2025-114"
    assert not e.expired(NOW) and e.expired(NOW + timedelta(days=366))
    for bad in (
        {"legal_basis": ""},
        {"case_ref": ""},
        {"expires_at": NOW},
        {"embedding": emb([1.0] * 8)},
        {"tenant": "Bad Tenant"},
        {"entry_id": "x"},
    ):
        with pytest.raises(ValidationError):
            entry(**bad)


def test_enrolment_needs_consent() -> None:
    watchlist_only = {"entry_id", "label", "legal_basis", "case_ref", "status", "approved_by"}
    base = entry().model_dump(exclude=watchlist_only | {"approved_at"})
    ok = Enrolment.model_validate({**base, "subject": "acct-1", "consent_ref": "IVR-2025-01"})
    assert ok.expires_at is not None and not ok.expired(NOW)
    with pytest.raises(ValidationError):
        Enrolment.model_validate({**base, "subject": "acct-1"})


def test_call_update_sets_something_and_parses_ids() -> None:
    u = CallUpdate(
        command_id=new_id("cu"),
        call_id="c-1",
        claimed_account="acct-1",
        requested_by="ivr",
        at=NOW,
    )
    assert u.fields() == {"claimed_account": "acct-1"}
    with pytest.raises(ValidationError, match="at least one field"):
        CallUpdate(command_id=new_id("cu"), call_id="c-1", requested_by="ivr", at=NOW)
    with pytest.raises(ValidationError):
        CallUpdate(command_id=new_id("cu"), call_id="c 1", queue="q", requested_by="x", at=NOW)
