"""Phone numbers: masked in every payload by default, never in a log line.

A phone number here is a run of 7 to 15 digits, optionally with a leading ``+`` and
spaces, dashes or parentheses between them (no dots: ``1764504000.42`` is an Asterisk
linkedid, not a number). A field "is" a phone number when all of it is such a run.
Masking keeps the ``+`` and the last three digits (``+•••••••••567``): enough to tell
two numbers apart in triage, not enough to call anyone. CallShield's own opaque ids
(``wl_c7fff0c3606552bb``, ``call_…``, ``al_…``: a short lower-case prefix, ``_``, 16 or
more hex digits with at least one letter) are left whole, even where their hex holds a
run of digits: an analyst must be able to read which watchlist entry a reason names.
``RedactingFilter`` applies the same rule to every log record the dashboard's process
emits, as a second line of defence behind "never log them".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Final

PHONE_RE: Final = re.compile(r"\+?\(?\d[\d ()\-]{5,22}\d")
OPAQUE_ID_RE: Final = re.compile(
    r"(?<![A-Za-z0-9_])[a-z]{1,6}_(?=[0-9a-f]*[a-f])[0-9a-f]{16,64}(?![A-Za-z0-9_])"
)
_KEEP: Final = 3
_DOT: Final = "•"


def _mask_match(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = [c for c in text if c.isdigit()]
    if not 7 <= len(digits) <= 15:  # separators made the run look longer than it is
        return text
    head = "+" if text.startswith("+") else ""
    return head + _DOT * (len(digits) - _KEEP) + "".join(digits[-_KEEP:])


def mask_text(text: str) -> str:
    """``text`` with every phone-number-like run masked (opaque ids left whole)."""
    out: list[str] = []
    done = 0
    for ident in OPAQUE_ID_RE.finditer(text):
        out.append(PHONE_RE.sub(_mask_match, text[done : ident.start()]))
        out.append(ident.group(0))
        done = ident.end()
    out.append(PHONE_RE.sub(_mask_match, text[done:]))
    return "".join(out)


def is_phone_number(value: str) -> bool:
    match = PHONE_RE.fullmatch(value.strip())
    return match is not None and 7 <= sum(c.isdigit() for c in value) <= 15


def mask_number(value: str) -> str:
    """A field that holds a phone number, masked (``""`` stays ``""``)."""
    return mask_text(value.strip()) if value else value


def mask_ids(values: Mapping[str, str]) -> dict[str, str]:
    """External ids with the values that are phone numbers masked; the rest (channel
    ids, CallSids, UUIDs) stay usable."""
    return {k: mask_number(v) if is_phone_number(v) else v for k, v in values.items()}


def has_phone_number(text: str) -> bool:
    bare = OPAQUE_ID_RE.sub(" ", text)
    return any(7 <= sum(c.isdigit() for c in m.group(0)) <= 15 for m in PHONE_RE.finditer(bare))


class RedactingFilter(logging.Filter):
    """Masks phone-number-like runs in a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own handling
            return True
        if has_phone_number(message):
            record.msg = mask_text(message)
            record.args = None
        return True


def install_redaction(*logger_names: str) -> RedactingFilter:
    """Adds the filter to the root logger's handlers and to the named loggers."""
    flt = RedactingFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    for name in logger_names:
        logging.getLogger(name).addFilter(flt)
    return flt
