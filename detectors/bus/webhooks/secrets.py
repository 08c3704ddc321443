"""Endpoint signing secrets: generated per endpoint, encrypted at rest (Fernet), the key
from a file or the environment and never in Redis. Rotation keeps the previous secret
for an overlap period; deliveries are signed with every live secret (Standard Webhooks
allows several space-separated signatures), so receivers can switch without downtime.
"""

from __future__ import annotations

import base64
import secrets as pysecrets

from cryptography.fernet import Fernet, InvalidToken

from detectors.bus.secret_source import resolve_secret
from detectors.bus.settings import BusSettings

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(pysecrets.token_bytes(32)).decode()


def load_key(settings: BusSettings) -> Fernet:
    """The encryption key: ``webhook_key_file`` (preferred), else the ``webhook_key``
    secret spec (``file:/path``, ``env:VAR``; a literal only for development)."""
    if settings.webhook_key_file is not None:
        raw = settings.webhook_key_file.read_bytes().strip()
    elif settings.webhook_key is not None:
        spec = settings.webhook_key.get_secret_value()
        raw = resolve_secret(spec, "CALLSHIELD_WEBHOOK_KEY").encode()
    else:
        raise ValueError(
            "no webhook secret key: set CALLSHIELD_WEBHOOK_KEY_FILE (a file holding "
            "`Fernet.generate_key()`) or CALLSHIELD_WEBHOOK_KEY"
        )
    try:
        return Fernet(raw)
    except ValueError:
        raise ValueError(
            "webhook secret key is not a Fernet key (32 url-safe base64 bytes)"
        ) from None


def encrypt(key: Fernet, secret: str) -> str:
    return key.encrypt(secret.encode()).decode()


def decrypt(key: Fernet, token: str) -> str:
    try:
        return key.decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("endpoint secret does not decrypt with this key") from None
