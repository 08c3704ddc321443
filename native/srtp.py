"""SRTP (RFC 3711 / RFC 7714) of the native core, for SDES-keyed legs (RFC 4568).

The receive path runs in C inside the ingest thread (``Ingest.set_srtp``); this module
names the suites and wraps one standalone context (``native/src/srtp_rx.h``) for tests,
benchmarks and tools that protect or unprotect packets themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from native import ffi, lib

__all__ = ["SRTP_ERRORS", "SRTP_SUITES", "SrtpContext", "SrtpKey", "key_length", "suite_code"]

# a=crypto suite names (RFC 4568 6.2, RFC 7714 14.2) -> CS_SRTP_* codes, best first.
SRTP_SUITES: Final = {
    "AEAD_AES_128_GCM": int(lib.CS_SRTP_AEAD_AES_128_GCM),
    "AES_CM_128_HMAC_SHA1_80": int(lib.CS_SRTP_AES_CM_128_HMAC_SHA1_80),
    "AES_CM_128_HMAC_SHA1_32": int(lib.CS_SRTP_AES_CM_128_HMAC_SHA1_32),
}
SRTP_ERRORS: Final = {
    int(lib.CS_SRTP_OK): "ok",
    int(lib.CS_SRTP_ERR_MALFORMED): "malformed",
    int(lib.CS_SRTP_ERR_AUTH): "auth",
    int(lib.CS_SRTP_ERR_REPLAY): "replay",
    int(lib.CS_SRTP_ERR_NO_KEY): "no_key",
    int(lib.CS_SRTP_ERR_SSRC_LIMIT): "ssrc_limit",
}


@dataclass(frozen=True, slots=True)
class SrtpKey:
    """What one direction of an SDES-keyed stream needs: the suite, master key || master
    salt, and the MKI its packets carry (b"": none). Never logged (repr hides the key)."""

    suite: str
    key_salt: bytes = field(repr=False)
    mki: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if len(self.key_salt) != key_length(self.suite):
            raise ValueError(f"{self.suite} needs a {key_length(self.suite)}-byte key and salt")
        if len(self.mki) > int(lib.CS_SRTP_MAX_MKI):
            raise ValueError(f"MKI longer than {int(lib.CS_SRTP_MAX_MKI)} bytes")


def suite_code(suite: str) -> int:
    """CS_SRTP_* code of an a=crypto suite name; ValueError for one we do not support."""
    try:
        return SRTP_SUITES[suite]
    except KeyError:
        raise ValueError(f"unsupported SRTP suite {suite[:40]!r}") from None


def key_length(suite: str) -> int:
    """Bytes of master key || master salt the suite's inline key carries (30 or 28)."""
    return 28 if suite_code(suite) == lib.CS_SRTP_AEAD_AES_128_GCM else 30


class SrtpContext:
    """One SRTP crypto context (not thread-safe). ``unprotect`` keeps the receiver's
    index, ROC and replay window per SSRC; ``protect`` takes the sender's ROC explicitly."""

    def __init__(self, suite: str, key_salt: bytes, mki: bytes = b"") -> None:
        ptr = lib.cs_srtp_new()
        if ptr == ffi.NULL:
            raise MemoryError("cs_srtp_new failed")
        self._ctx: Any = ffi.gc(ptr, lib.cs_srtp_free)
        self._buf = ffi.new("uint8_t[]", 65536)
        self._len = ffi.new("size_t *")
        self.rekey(suite, key_salt, mki)

    def rekey(self, suite: str, key_salt: bytes, mki: bytes = b"") -> bool:
        """True when this is a new key (index and window restart), False when the same."""
        rc = lib.cs_srtp_set_key(
            self._ctx, suite_code(suite), key_salt, len(key_salt), mki or ffi.NULL, len(mki)
        )
        if rc < 0:
            raise ValueError(
                f"bad SRTP key for {suite}: {len(key_salt)} bytes, MKI of {len(mki)} bytes"
            )
        return bool(rc == 1)

    def protect(self, packet: bytes, roc: int = 0) -> bytes:
        n = len(packet)
        self._buf[0:n] = packet
        self._len[0] = n
        rc = lib.cs_srtp_protect(self._ctx, self._buf, self._len, 65536, roc & 0xFFFFFFFF)
        if rc != lib.CS_SRTP_OK:
            raise ValueError(f"cannot protect: {SRTP_ERRORS.get(rc, rc)}")
        return bytes(ffi.buffer(self._buf, self._len[0]))

    def unprotect(self, packet: bytes) -> tuple[str, bytes]:
        """("ok", plain RTP) or (reason, b"") with reason malformed/auth/replay/no_key/
        ssrc_limit (index, ROC and replay window are per SSRC, at most CS_SRTP_MAX_SSRCS)."""
        n = len(packet)
        if n > 65536:
            return "malformed", b""
        self._buf[0:n] = packet
        self._len[0] = n
        rc = int(lib.cs_srtp_unprotect(self._ctx, self._buf, self._len))
        if rc != lib.CS_SRTP_OK:
            return SRTP_ERRORS.get(rc, "unknown"), b""
        return "ok", bytes(ffi.buffer(self._buf, self._len[0]))
