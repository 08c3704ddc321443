"""OpenID Connect ID tokens: PKCE (RFC 7636), JWKS keys and the ID token's checks
(OIDC Core §3.1.3.7), with ``cryptography`` only (no JOSE library).

- Signatures: RS256 (RSA >= 2048 bits, PKCS#1 v1.5) and ES256 (P-256, the JWS raw
  ``r || s`` form). Anything else (``none``, HS256: the alg-confusion attacks) is
  refused. The key is chosen by ``kid``, or the only key of the algorithm's type.
- Claims: ``iss`` equals the configured issuer, ``aud`` holds the client id (and ``azp``
  names it when there are several audiences), ``exp`` not passed and ``iat`` neither in
  the future nor older than ``max_age_s`` (both within ``leeway_s``), ``nonce`` equals
  the one this login sent, ``sub`` present.

Every failure is an ``OidcError`` with a message that names the check, never a token.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

ALGORITHMS = ("RS256", "ES256")
MIN_RSA_BITS = 2048
MAX_TOKEN_CHARS = 16_384

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class OidcError(Exception):
    """A login that must be refused; the message says which check failed."""


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or not all(c.isalnum() or c in "-_" for c in text):
        raise OidcError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge): 43 characters of 32 random bytes."""
    verifier = secrets.token_urlsafe(32)
    return verifier, pkce_challenge(verifier)


def pkce_challenge(verifier: str) -> str:
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


def _int(jwk: dict[str, Any], name: str) -> int:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise OidcError(f"JWK lacks {name}")
    return int.from_bytes(b64url_decode(value), "big")


def jwk_public_key(jwk: dict[str, Any]) -> PublicKey:
    """An RSA or P-256 public key from its JWK."""
    kty = jwk.get("kty")
    if kty == "RSA":
        key = rsa.RSAPublicNumbers(_int(jwk, "e"), _int(jwk, "n")).public_key()
        if key.key_size < MIN_RSA_BITS:
            raise OidcError(f"RSA key of {key.key_size} bits refused")
        return key
    if kty == "EC":
        if jwk.get("crv") != "P-256":
            raise OidcError(f"EC curve {jwk.get('crv')!r} refused (P-256 only)")
        try:
            return ec.EllipticCurvePublicNumbers(
                _int(jwk, "x"), _int(jwk, "y"), ec.SECP256R1()
            ).public_key()
        except ValueError:
            raise OidcError("EC key is not on P-256") from None
    raise OidcError(f"JWK type {kty!r} refused")


def _kty(alg: str) -> str:
    return "RSA" if alg == "RS256" else "EC"


def select_key(jwks: dict[str, Any], alg: str, kid: str | None) -> PublicKey:
    keys = jwks.get("keys")
    if not isinstance(keys, list):
        raise OidcError("JWKS has no keys")
    usable = [
        k
        for k in keys
        if isinstance(k, dict)
        and k.get("kty") == _kty(alg)
        and k.get("use", "sig") == "sig"
        and k.get("alg", alg) == alg
    ]
    if kid is not None:
        usable = [k for k in usable if k.get("kid") == kid]
    if len(usable) != 1:
        raise OidcError(f"no single {alg} signing key for kid {kid!r} in the provider's JWKS")
    return jwk_public_key(usable[0])


def verify_signature(key: PublicKey, alg: str, signed: bytes, signature: bytes) -> None:
    try:
        if alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            return
        if alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey):
            if len(signature) != 64:
                raise OidcError("ES256 signature is not 64 bytes")
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(hashes.SHA256()))
            return
    except InvalidSignature:
        raise OidcError("ID token signature does not verify") from None
    raise OidcError(f"key type does not match {alg}")


@dataclass(frozen=True, slots=True)
class Expected:
    """What this login's ID token must say."""

    issuer: str
    client_id: str
    nonce: str
    now: float
    leeway_s: float = 60.0
    max_age_s: float = 600.0


def _json_part(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(b64url_decode(text))
    except (ValueError, OidcError):
        raise OidcError(f"ID token {what} is not base64url JSON") from None
    if not isinstance(value, dict):
        raise OidcError(f"ID token {what} is not a JSON object")
    return value


def verify_id_token(token: str, jwks: dict[str, Any], want: Expected) -> dict[str, Any]:
    """The ID token's claims once its signature and claims check out."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise OidcError("ID token missing or too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise OidcError("ID token is not a compact JWS")
    header = _json_part(parts[0], "header")
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise OidcError(f"ID token algorithm {alg!r} refused (RS256 or ES256 only)")
    if "crit" in header:
        raise OidcError("ID token has critical header parameters")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise OidcError("ID token kid is not a string")
    key = select_key(jwks, str(alg), kid)
    try:
        signature = b64url_decode(parts[2])
    except OidcError:
        raise OidcError("ID token signature is not base64url") from None
    verify_signature(key, str(alg), f"{parts[0]}.{parts[1]}".encode("ascii"), signature)
    claims = _json_part(parts[1], "payload")
    check_claims(claims, want)
    return claims


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OidcError(f"ID token lacks a numeric {name}")
    return float(value)


def check_claims(claims: dict[str, Any], want: Expected) -> None:
    if claims.get("iss") != want.issuer:
        raise OidcError("ID token issuer is not the configured issuer")
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if want.client_id not in audiences:
        raise OidcError("ID token audience does not include this client")
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != want.client_id:
        raise OidcError("ID token azp is not this client")
    if _number(claims, "exp") <= want.now - want.leeway_s:
        raise OidcError("ID token expired")
    iat = _number(claims, "iat")
    if iat > want.now + want.leeway_s:
        raise OidcError("ID token issued in the future")
    if iat < want.now - want.max_age_s - want.leeway_s:
        raise OidcError("ID token issued too long ago")
    nonce = claims.get("nonce")
    if not isinstance(nonce, str) or not hmac.compare_digest(
        nonce.encode("utf-8"), want.nonce.encode("utf-8")
    ):
        raise OidcError("ID token nonce does not match this login")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise OidcError("ID token lacks sub")
