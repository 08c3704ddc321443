"""SDES: SRTP keys in SDP (RFC 4568 ``a=crypto``), for RTP/SAVP and RTP/SAVPF m-lines.

``a=crypto:<tag> <suite> inline:<base64 key||salt>[|<lifetime>][|<MKI>:<length>] [params]``

We only receive, so of an offer's crypto lines we pick the best one we support (our
preference: AEAD_AES_128_GCM, AES_CM_128_HMAC_SHA1_80, AES_CM_128_HMAC_SHA1_32; ties go
to the offer's order) and hand its key to the leg's ingest stream. The answer must still
carry one crypto line with the same tag and suite and a key of our own (RFC 4568 section
7.1.3): a fresh random one, which nothing ever uses.

A line is unusable (skipped, and the m-line is rejected when none is left) when its
suite is not one of ours, its key does not decode to the suite's length, it carries more
than one key, an MKI longer than 4 bytes, or a session parameter that would change how
SRTP packets look: UNENCRYPTED_SRTP, UNAUTHENTICATED_SRTP, a non-zero KDR, FEC_ORDER,
FEC_KEY, or one we do not know (section 6.3: an unknown parameter invalidates the line).
UNENCRYPTED_SRTCP and the window-size hint WSH are accepted: we ignore SRTCP, and our
replay window is 128 packets. Lifetimes are checked for form and not enforced (the sender
re-keys). Parsing is pure; ``ValueError`` with an exact message for a malformed line.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass, field
from typing import Final

from native.srtp import SRTP_SUITES, SrtpKey, key_length

PREFERENCE: Final = tuple(SRTP_SUITES)  # best first
MAX_MKI_BYTES: Final = 4
_IGNORED_PARAMS: Final = frozenset({"UNENCRYPTED_SRTCP"})


@dataclass(frozen=True, slots=True)
class CryptoLine:
    """One parsed a=crypto value (its first key only; ``keys`` counts them)."""

    tag: int
    suite: str
    key_salt: bytes = field(repr=False)
    mki: bytes = field(repr=False)
    keys: int
    params: tuple[str, ...]

    @classmethod
    def parse(cls, value: str) -> CryptoLine:
        parts = value.split()
        if len(parts) < 3:
            raise ValueError(f"a=crypto needs a tag, a suite and key parameters: {value[:48]!r}")
        tag_text, suite, key_params = parts[0], parts[1], parts[2]
        if not tag_text.isdigit() or len(tag_text) > 9:
            raise ValueError(f"bad a=crypto tag {tag_text[:16]!r}")
        keys = key_params.split(";")
        key_salt, mki = _key_info(keys[0])
        return cls(int(tag_text), suite, key_salt, mki, len(keys), tuple(parts[3:]))

    def unusable(self) -> str:
        """Why we cannot receive with this line ("" when we can)."""
        if self.suite not in SRTP_SUITES:
            return f"suite {self.suite[:40]} not supported"
        if len(self.key_salt) != key_length(self.suite):
            return f"{self.suite} key is {len(self.key_salt)} bytes, not {key_length(self.suite)}"
        if self.keys != 1:
            return "more than one key"
        if len(self.mki) > MAX_MKI_BYTES:
            return f"MKI longer than {MAX_MKI_BYTES} bytes"
        for param in self.params:
            if not _param_ok(param):
                return f"session parameter {param[:32]} not supported"
        return ""

    def key(self) -> SrtpKey:
        return SrtpKey(self.suite, self.key_salt, self.mki)


def _key_info(text: str) -> tuple[bytes, bytes]:
    method, sep, info = text.partition(":")
    if not sep or method.lower() != "inline":
        raise ValueError(f"a=crypto key method must be inline: {text[:24]!r}")
    fields = info.split("|")
    if len(fields) > 3:
        raise ValueError("a=crypto key info has too many fields")
    try:
        key_salt = base64.b64decode(fields[0], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a=crypto key is not base64") from None
    mki = b""
    for extra in fields[1:]:
        if ":" in extra:
            mki = _mki(extra)
        elif not _lifetime_ok(extra):
            raise ValueError(f"bad a=crypto lifetime {extra[:16]!r}")
    return key_salt, mki


def _mki(text: str) -> bytes:
    value, _, length = text.partition(":")
    if not value.isdigit() or not length.isdigit() or not 1 <= int(length) <= 128:
        raise ValueError(f"bad a=crypto MKI {text[:24]!r}")
    n, v = int(length), int(value)
    if v >= 1 << (8 * min(n, 16)):
        raise ValueError(f"a=crypto MKI {text[:24]!r} does not fit its length")
    return v.to_bytes(n, "big")


def _lifetime_ok(text: str) -> bool:
    if text.startswith("2^"):
        return text[2:].isdigit() and 0 < int(text[2:]) <= 48
    return text.isdigit() and 0 < int(text) <= 1 << 48


def _param_ok(param: str) -> bool:
    name, _, value = param.partition("=")
    if name in _IGNORED_PARAMS and not value:
        return True
    if name == "WSH":
        return value.isdigit() and int(value) >= 64
    if name == "KDR":
        return value == "0"
    return False


def choose(values: list[str]) -> tuple[CryptoLine | None, str]:
    """The line to receive with among an m-line's a=crypto values, or (None, why)."""
    usable: list[CryptoLine] = []
    reasons: list[str] = []
    for value in values:
        try:
            line = CryptoLine.parse(value)
        except ValueError as exc:
            reasons.append(str(exc))
            continue
        why = line.unusable()
        if why:
            reasons.append(why)
        else:
            usable.append(line)
    if not usable:
        return None, "; ".join(reasons) or "no a=crypto line"
    return min(usable, key=lambda line: PREFERENCE.index(line.suite)), ""


def answer_value(line: CryptoLine) -> str:
    """Our a=crypto value for the answer: same tag and suite, a fresh key of ours."""
    key = secrets.token_bytes(key_length(line.suite))
    return f"{line.tag} {line.suite} inline:{base64.b64encode(key).decode()}"
