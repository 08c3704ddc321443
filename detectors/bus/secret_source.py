"""Where a secret comes from, said in one string (a "secret spec"):

  ``file:/run/secrets/name``  the file's content, surrounding whitespace stripped (the
                              production form: a mounted secret, a KMS agent's output)
  ``env:NAME``                the environment variable ``NAME``
  ``literal:VALUE`` or VALUE  the value itself: for development only, logged as a warning

Used for the dashboard's session key, the webhook secrets' encryption key and the Redis
ACL passwords. None of them is ever read from Redis: whoever can write Redis must not be
able to mint sessions or decrypt endpoint secrets. Pure: no I/O beyond the named file.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

FILE, ENV, LITERAL = "file:", "env:", "literal:"


def describe(spec: str) -> str:
    """Where ``spec`` points, without its value (for error and log messages)."""
    if spec.startswith(FILE):
        return f"file {spec[len(FILE) :]}"
    if spec.startswith(ENV):
        return f"environment variable {spec[len(ENV) :]}"
    return "a literal value"


def resolve_secret(spec: str, what: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret ``spec`` names; ``what`` names it in messages (never the value).

    Raises ``ValueError`` when the file cannot be read, the variable is unset, or the
    secret is empty. A file readable by group or others is used with a warning."""
    if spec.startswith(FILE):
        path = Path(spec[len(FILE) :])
        try:
            value = path.read_text(encoding="utf-8").strip()
            mode = path.stat().st_mode
        except OSError as exc:
            raise ValueError(f"{what}: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{what}: {path} is not UTF-8 text") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("%s: %s is readable by group or others (chmod 600)", what, path)
    elif spec.startswith(ENV):
        name = spec[len(ENV) :]
        found = (os.environ if environ is None else environ).get(name)
        if found is None:
            raise ValueError(f"{what}: environment variable {name} is not set")
        value = found.strip()
    else:
        value = spec[len(LITERAL) :] if spec.startswith(LITERAL) else spec
        log.warning(
            "%s is given as a literal value: for development only; use file:/path or env:NAME",
            what,
        )
    if not value:
        raise ValueError(f"{what} is empty ({describe(spec)})")
    return value
