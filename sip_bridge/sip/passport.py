"""STIR/SHAKEN PASSporTs (RFC 8224 Identity header, RFC 8225 PASSporT, RFC 8588 SHAKEN
extension): parse the header and its JWS, verify against a local trust store.

The ``Identity`` header value is a JWS in compact serialisation followed by
parameters: ``<header>.<claims>.<signature>;info=<x5u>;alg=ES256;ppt=shaken``. Only the
full form is verified (SHAKEN mandates it); the compact form (claims omitted, RFC 8225
§7) is reported ``unverified`` with reason ``compact_form``.

Verification (RFC 8224 §6.2, ATIS-1000074) needs certificates we cannot fetch at run
time, so the trust store is local: a directory of trusted root CA certificates and a
cache of the certificates the ``x5u`` URLs point to (see :class:`TrustStore`). The
checks, in order: the token parses and says ES256; ``iat`` is within 60 s of now; the
x5u certificate is in the cache; its chain ends at a trusted root (at the time of the
call); the ES256 signature over ``header.claims`` verifies with its key; ``orig.tn``
is the caller's number (P-Asserted-Identity, else From). Results: ``verified``,
``failed`` with a reason, ``unverified`` with a reason (no trust store, unknown x5u,
compact form). Verified chains are cached per x5u for the signalling path.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.verification import ExtensionPolicy, PolicyBuilder, Store

log = logging.getLogger(__name__)
MAX_IDENTITY_BYTES: Final = 4096
FRESHNESS_S: Final = 60.0
ATTESTATIONS: Final = frozenset({"A", "B", "C"})
Status = Literal["verified", "failed", "unverified"]
_B64URL: Final = re.compile(r"^[A-Za-z0-9_-]*$")
_DIGITS: Final = re.compile(r"[^0-9]")


class PassportError(ValueError):
    """A PASSporT or Identity header that does not parse (reason ``malformed``)."""


def _b64url(text: str) -> bytes:
    if not _B64URL.match(text):
        raise PassportError("JWS part is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise PassportError("JWS part is not base64url") from None


def _json_object(raw: bytes, what: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise PassportError(f"PASSporT {what} is not JSON") from None
    if not isinstance(value, dict):
        raise PassportError(f"PASSporT {what} is not a JSON object")
    return value


def tn_digits(number: str) -> str:
    """A telephone number in canonical form (RFC 8224 §8.3): digits only."""
    return _DIGITS.sub("", number)


@dataclass(frozen=True, slots=True)
class Passport:
    """One PASSporT of an Identity header, decoded (nothing checked yet)."""

    alg: str
    ppt: str  # "shaken", or "" for a base PASSporT
    x5u: str
    info: str  # the header's info parameter (should equal x5u)
    attest: str | None
    origid: str | None
    orig_tn: str
    dest_tns: tuple[str, ...]
    iat: int | None
    signing_input: bytes
    signature: bytes
    compact: bool = False

    @classmethod
    def parse(cls, value: str) -> Passport:
        """``value`` is one Identity header value; raises PassportError."""
        if len(value) > MAX_IDENTITY_BYTES:
            raise PassportError("Identity header too long")
        token, _, rest = value.strip().partition(";")
        params = _params(rest)
        parts = token.strip().split(".")
        if len(parts) != 3:
            raise PassportError("Identity is not a compact JWS (three dot-separated parts)")
        header = _json_object(_b64url(parts[0]), "header")
        compact = parts[1] == ""
        claims = {} if compact else _json_object(_b64url(parts[1]), "claims")
        signature = _b64url(parts[2])
        alg = _str(header.get("alg")) or params.get("alg", "")
        ppt = _str(header.get("ppt")) or params.get("ppt", "")
        orig = claims.get("orig")
        dest = claims.get("dest")
        orig_tn = _str(orig.get("tn")) if isinstance(orig, dict) else ""
        dest_tns: tuple[str, ...] = ()
        if isinstance(dest, dict):
            tns = dest.get("tn")
            if isinstance(tns, list):
                dest_tns = tuple(t for t in tns if isinstance(t, str))[:8]
            elif isinstance(tns, str):
                dest_tns = (tns,)
        iat = claims.get("iat")
        attest = _str(claims.get("attest")).upper() or None
        if attest is not None and attest not in ATTESTATIONS:
            raise PassportError("attest is not A, B or C")
        return cls(
            alg=alg,
            ppt=ppt.lower(),
            x5u=_str(header.get("x5u")),
            info=params.get("info", "").strip("<>"),
            attest=attest,
            origid=_str(claims.get("origid"))[:64] or None,
            orig_tn=orig_tn[:32],
            dest_tns=tuple(t[:32] for t in dest_tns),
            iat=iat if isinstance(iat, int) and not isinstance(iat, bool) else None,
            signing_input=f"{parts[0]}.{parts[1]}".encode(),
            signature=signature,
            compact=compact,
        )


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _params(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(";"):
        name, sep, value = part.strip().partition("=")
        if name and sep:
            out[name.strip().lower()] = value.strip().strip('"')
    return out


@dataclass(frozen=True, slots=True)
class Verification:
    status: Status
    reason: str = ""


@dataclass(frozen=True, slots=True)
class _Chain:
    key: ec.EllipticCurvePublicKey | None
    reason: str  # "" when the chain verified
    not_after: float  # the earliest expiry in the chain (unix seconds)


class TrustStore:
    """Trusted roots and the cached x5u certificates.

    ``ca_dir``: PEM files (``*.pem``, ``*.crt``), each with one or more root CA
    certificates. ``cert_cache``: the certificates x5u URLs point to, fetched ahead of
    time: ``index.json`` (``{"https://cr.example/sp.pem": "sp.pem"}``, file names
    relative to the directory), else a file named by the URL's SHA-256 hex digest plus
    ``.pem``. A cached file holds the signing certificate first, then intermediates.
    """

    def __init__(self, roots: list[x509.Certificate], cert_cache: Path | None) -> None:
        if not roots:
            raise ValueError("a STIR/SHAKEN trust store needs at least one root certificate")
        self.roots = roots
        self.cert_cache = cert_cache
        self._index: dict[str, str] = {}
        if cert_cache is not None and (cert_cache / "index.json").is_file():
            data = json.loads((cert_cache / "index.json").read_text())
            if not isinstance(data, dict):
                raise ValueError("index.json must map x5u URLs to file names")
            self._index = {str(k): str(v) for k, v in data.items()}
        self._chains: dict[str, _Chain] = {}

    @classmethod
    def load(cls, ca_dir: Path, cert_cache: Path | None) -> TrustStore:
        roots: list[x509.Certificate] = []
        for path in sorted(ca_dir.iterdir()):
            if path.suffix.lower() in (".pem", ".crt") and path.is_file():
                roots += x509.load_pem_x509_certificates(path.read_bytes())
        return cls(roots, cert_cache)

    def certificates(self, x5u: str) -> list[x509.Certificate] | None:
        """The cached chain for an x5u URL, or None when it is not cached."""
        if self.cert_cache is None or not x5u:
            return None
        name = self._index.get(x5u) or hashlib.sha256(x5u.encode()).hexdigest() + ".pem"
        path = (self.cert_cache / name).resolve()
        if self.cert_cache.resolve() not in path.parents or not path.is_file():
            return None
        try:
            return x509.load_pem_x509_certificates(path.read_bytes())
        except ValueError:
            log.warning("cached x5u certificate %s does not parse", path.name)
            return []

    def signing_key(self, x5u: str, now: float) -> _Chain | None:
        """The verified signing key of an x5u (None: not cached)."""
        chain = self._chains.get(x5u)
        if chain is not None and now < chain.not_after:
            return chain
        certs = self.certificates(x5u)
        if certs is None:
            return None
        chain = self._verify_chain(certs, now)
        if len(self._chains) >= 1024:
            self._chains.clear()
        self._chains[x5u] = chain
        return chain

    def _verify_chain(self, certs: list[x509.Certificate], now: float) -> _Chain:
        if not certs:
            return _Chain(None, "bad_certificate", now + 60)
        leaf, intermediates = certs[0], certs[1:]
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        verifier = (
            PolicyBuilder()
            .store(Store(self.roots))
            .time(at)
            .max_chain_depth(4)
            .extension_policies(
                ca_policy=ExtensionPolicy.webpki_defaults_ca(),
                ee_policy=ExtensionPolicy.permit_all(),
            )
            .build_client_verifier()
        )
        try:
            verified = verifier.verify(leaf, intermediates)
        except Exception as exc:  # VerificationError, or a certificate it cannot read
            log.info("x5u chain does not verify: %s", str(exc)[:160])
            return _Chain(None, "untrusted_chain", now + 60)
        key = leaf.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
            return _Chain(None, "bad_certificate", now + 60)
        not_after = min(c.not_valid_after_utc.timestamp() for c in verified.chain)
        return _Chain(key, "", not_after)


def verify(
    passport: Passport,
    store: TrustStore | None,
    caller_number: str,
    now: float,
) -> Verification:
    """Check one parsed PASSporT against the trust store at wall-clock time ``now``."""
    if passport.compact:
        return Verification("unverified", "compact_form")
    if passport.alg != "ES256":
        return Verification("failed", "unsupported_alg")
    if passport.iat is None or not passport.orig_tn:
        return Verification("failed", "malformed")
    if store is None:
        return Verification("unverified", "no_trust_store")
    if abs(now - passport.iat) > FRESHNESS_S:
        return Verification("failed", "stale_iat")
    if not passport.x5u or (passport.info and passport.info != passport.x5u):
        return Verification("failed", "x5u_mismatch")
    chain = store.signing_key(passport.x5u, now)
    if chain is None:
        return Verification("unverified", "unknown_x5u")
    if chain.key is None:
        return Verification("failed", chain.reason)
    if len(passport.signature) != 64:
        return Verification("failed", "bad_signature")
    r = int.from_bytes(passport.signature[:32], "big")
    s = int.from_bytes(passport.signature[32:], "big")
    try:
        chain.key.verify(
            encode_dss_signature(r, s), passport.signing_input, ec.ECDSA(hashes.SHA256())
        )
    except InvalidSignature:
        return Verification("failed", "bad_signature")
    if tn_digits(passport.orig_tn) != tn_digits(caller_number):
        return Verification("failed", "tn_mismatch")
    return Verification("verified")
