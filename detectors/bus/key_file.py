"""A 32-byte symmetric key kept outside Redis (issue 11): from a secret spec
(``file:/path``, ``env:NAME``; a literal only for development) holding 64 hex characters
or urlsafe base64, or, on a single box, from a 0600 file in the state directory created
on first use (two processes racing to create it end up sharing the first one's key).
Used by the phone-number vault and the evidence vault."""

from __future__ import annotations

import base64
import os
import re
import secrets
from pathlib import Path

from pydantic import SecretStr

from detectors.bus.secret_source import resolve_secret


def load_key(spec: SecretStr | None, what: str, default_path: Path) -> bytes:
    """The key ``spec`` names, else the one in ``default_path`` (created 0600).
    ``what`` names it in messages (e.g. ``CALLSHIELD_NUMBERS_KEY``)."""
    if spec is not None:
        return decode_key(resolve_secret(spec.get_secret_value(), what), what)
    return decode_key(read_or_create(default_path), what)


def decode_key(text: str, what: str) -> bytes:
    text = text.strip()
    if re.fullmatch(r"[0-9a-fA-F]{64}", text):
        return bytes.fromhex(text)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ValueError(f"{what} must be 32 bytes: 64 hex chars or base64")
    return raw


def read_or_create(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return path.read_text().strip()
    key = secrets.token_hex(32)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key
