"""Phone numbers at rest (issue 11): never in clear outside the bridge's memory.

A call's ANI and DNIS leave the bridge only *sealed* (AES-256-GCM, a fresh 96-bit nonce
per seal, the call id as associated data so a sealed blob cannot be moved to another
call) plus the ANI's *keyed hash* (HMAC-SHA256, truncated to 128 bits) that velocity
counters and watchlists use: equal numbers give equal hashes, but without the key the
hash cannot be inverted by enumerating the ~10^10 numbers of a country. Both sub-keys are
derived (HKDF-SHA256) from one 32-byte numbers key, which comes from a secret spec
(``CALLSHIELD_NUMBERS_KEY=file:/path`` or ``env:NAME``) or, on a single box, from a
0600 file in the state directory created on first use. It is never stored in Redis. The
dashboard opens sealed numbers only for the audited reveal and for masked display.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from detectors.alert_schema import CallNumbers
from detectors.bus.key_file import load_key
from detectors.bus.settings import BusSettings

_DIGITS = re.compile(r"[^0-9+*#]")
_VERSION = "n1"


def normalise(number: str) -> str:
    """What two spellings of one number share: digits (and +, *, #) only."""
    return _DIGITS.sub("", number)


class NumberVault:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the numbers key must be 32 bytes")
        okm = HKDF(
            algorithm=hashes.SHA256(), length=64, salt=None, info=b"callshield numbers"
        ).derive(key)
        self._aead = AESGCM(okm[:32])
        self._mac_key = okm[32:]

    def ani_hash(self, ani: str) -> str:
        """Keyed hash of a number for counting and matching; "" for no number."""
        n = normalise(ani)
        if not n:
            return ""
        return hmac.new(self._mac_key, n.encode(), hashlib.sha256).hexdigest()[:32]

    def seal(self, call_id: str, ani: str, dnis: str) -> CallNumbers:
        nonce = secrets.token_bytes(12)
        body = json.dumps({"ani": ani, "dnis": dnis}, separators=(",", ":")).encode()
        ct = self._aead.encrypt(nonce, body, call_id.encode())
        token = _VERSION + "." + base64.urlsafe_b64encode(nonce + ct).decode().rstrip("=")
        return CallNumbers(sealed=token, ani_hash=self.ani_hash(ani))

    def open(self, call_id: str, sealed: str) -> dict[str, str]:
        """{"ani", "dnis"}; ValueError for a blob of another key, call or version."""
        version, _, data = sealed.partition(".")
        if version != _VERSION or not data:
            raise ValueError("not a sealed-numbers token of this version")
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        try:
            body = self._aead.decrypt(raw[:12], raw[12:], call_id.encode())
        except InvalidTag:
            raise ValueError("sealed numbers do not open with this key for this call") from None
        out = json.loads(body)
        return {"ani": str(out.get("ani", "")), "dnis": str(out.get("dnis", ""))}


def load_vault(settings: BusSettings) -> NumberVault:
    """The deployment's vault: ``numbers_key`` (a secret spec holding 64 hex characters
    or urlsafe base64 of 32 bytes), else ``<state_dir>/numbers.key`` created 0600."""
    path = settings.state_dir / "numbers.key"
    return NumberVault(load_key(settings.numbers_key, "CALLSHIELD_NUMBERS_KEY", path))
