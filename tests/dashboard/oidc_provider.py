"""A small but real OpenID Connect provider for the tests: an HTTP server on 127.0.0.1
(discovery, authorize, token, JWKS) that signs ID tokens with a test RSA or P-256 key.

It checks what a provider checks: the client's redirect URI and secret (Basic), the
authorization code used once, PKCE S256 (the verifier against the challenge). ``fault``
makes it misbehave the way an attacker or a broken provider would (tampered signature,
another nonce, audience or issuer, an expired token, ``alg: none``, HS256 signed with the
public key, an unknown key id), so the dashboard's refusals are tested end to end.

``/authorize`` answers a redirect straight back for ``auto_user``; without one it shows
a login form (the browser test fills it in), as a real provider would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64(n: int, size: int | None = None) -> str:
    size = size or (n.bit_length() + 7) // 8
    return b64url(n.to_bytes(size, "big"))


@dataclass
class SigningKey:
    alg: str  # RS256 or ES256
    kid: str
    private: Any

    @classmethod
    def new(cls, alg: str = "RS256") -> SigningKey:
        if alg == "RS256":
            private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        else:
            private = ec.generate_private_key(ec.SECP256R1())
        return cls(alg, secrets.token_hex(4), private)

    def jwk(self) -> dict[str, str]:
        pub = self.private.public_key().public_numbers()
        if self.alg == "RS256":
            return {
                "kty": "RSA",
                "kid": self.kid,
                "use": "sig",
                "alg": "RS256",
                "n": _int_b64(pub.n),
                "e": _int_b64(pub.e),
            }
        return {
            "kty": "EC",
            "kid": self.kid,
            "use": "sig",
            "alg": "ES256",
            "crv": "P-256",
            "x": _int_b64(pub.x, 32),
            "y": _int_b64(pub.y, 32),
        }

    def sign(self, data: bytes) -> bytes:
        if self.alg == "RS256":
            sig: bytes = self.private.sign(data, padding.PKCS1v15(), hashes.SHA256())
            return sig
        r, s = decode_dss_signature(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def public_pem(self) -> bytes:
        pem: bytes = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem


FAULTS = (
    "tampered_signature",
    "wrong_nonce",
    "wrong_audience",
    "wrong_issuer",
    "expired",
    "alg_none",
    "hs256_with_public_key",
    "unknown_kid",
)


@dataclass
class Provider:
    client_id: str
    client_secret: str
    redirect_uri: str
    clock: Callable[[], float]
    users: dict[str, dict[str, Any]]  # username -> extra claims (groups, ...)
    key: SigningKey = field(default_factory=SigningKey.new)
    auto_user: str | None = None
    fault: str | None = None
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    host: str = "127.0.0.1"

    @property
    def issuer(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> None:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                provider._get(self)

            def do_POST(self) -> None:
                provider._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ---- HTTP -----------------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any, ctype: str) -> None:
        data = body if isinstance(body, bytes) else body.encode()
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _json(self, h: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        self._send(h, status, json.dumps(body), "application/json")

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/.well-known/openid-configuration":
            self._json(
                h,
                200,
                {
                    "issuer": self.issuer,
                    "authorization_endpoint": self.issuer + "/authorize",
                    "token_endpoint": self.issuer + "/token",
                    "jwks_uri": self.issuer + "/jwks",
                    "response_types_supported": ["code"],
                    "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                    "code_challenge_methods_supported": ["S256"],
                },
            )
        elif url.path == "/jwks":
            self._json(h, 200, {"keys": [self.key.jwk()]})
        elif url.path == "/authorize":
            self.authorize_requests.append(query)
            if self.auto_user is not None:
                self._redirect_back(h, query, self.auto_user)
            else:
                self._form(h, query)
        else:
            self._send(h, 404, "not found", "text/plain")

    def _form(self, h: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in query.items()
        )
        page = (
            "<!doctype html><title>Test IdP</title><form method=post action=/authorize>"
            f'{hidden}<input name="username" id="idp-user"><button id="idp-go">Sign in</button>'
            "</form>"
        )
        self._send(h, 200, page, "text/html")

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length", "0"))
        form = {k: v[0] for k, v in parse_qs(h.rfile.read(length).decode()).items()}
        if h.path == "/authorize":
            self._redirect_back(h, form, form.get("username", ""))
        elif h.path == "/token":
            self._token(h, form)
        else:
            self._send(h, 404, "not found", "text/plain")

    def _redirect_back(self, h: BaseHTTPRequestHandler, q: dict[str, str], user: str) -> None:
        if (
            q.get("client_id") != self.client_id
            or q.get("redirect_uri") != self.redirect_uri
            or q.get("response_type") != "code"
            or q.get("code_challenge_method") != "S256"
            or not q.get("code_challenge")
            or "openid" not in q.get("scope", "").split()
        ):
            self._send(h, 400, "bad authorization request", "text/plain")
            return
        if user not in self.users:
            target = (
                self.redirect_uri
                + "?"
                + urlencode({"error": "access_denied", "state": q.get("state", "")})
            )
        else:
            code = secrets.token_urlsafe(24)
            self.codes[code] = {"user": user, **q}
            target = self.redirect_uri + "?" + urlencode({"code": code, "state": q["state"]})
        h.send_response(302)
        h.send_header("Location", target)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _token(self, h: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        self.token_requests.append({**form, "authorization": h.headers.get("Authorization")})
        auth = self._client_auth(h.headers.get("Authorization", ""))
        if auth != (self.client_id, self.client_secret):
            self._json(h, 401, {"error": "invalid_client"})
            return
        grant = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = b64url(hashlib.sha256(verifier.encode()).digest())
        if (
            grant is None
            or form.get("grant_type") != "authorization_code"
            or form.get("redirect_uri") != grant["redirect_uri"]
            or not hmac.compare_digest(challenge, grant["code_challenge"])
        ):
            self._json(h, 400, {"error": "invalid_grant"})
            return
        self._json(
            h,
            200,
            {
                "access_token": secrets.token_urlsafe(16),
                "token_type": "Bearer",
                "id_token": self.id_token(grant),
            },
        )

    @staticmethod
    def _client_auth(header: str) -> tuple[str, str] | None:
        """client_secret_basic: id and secret form-urlencoded, then Basic (RFC 6749 2.3.1)."""
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return unquote_plus(user), unquote_plus(password)

    # ---- tokens ---------------------------------------------------------------------
    def id_token(self, grant: dict[str, Any]) -> str:
        now = int(self.clock())
        user = grant["user"]
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": f"sub-{user}",
            "aud": self.client_id,
            "exp": now + 300,
            "iat": now,
            "nonce": grant.get("nonce", ""),
            "preferred_username": user,
            **self.users[user],
        }
        header: dict[str, Any] = {"alg": self.key.alg, "kid": self.key.kid, "typ": "JWT"}
        fault = self.fault
        if fault == "wrong_nonce":
            claims["nonce"] = secrets.token_urlsafe(16)
        elif fault == "wrong_audience":
            claims["aud"] = "another-client"
        elif fault == "wrong_issuer":
            claims["iss"] = "https://evil.example"
        elif fault == "expired":
            claims["iat"], claims["exp"] = now - 900, now - 600
        elif fault == "unknown_kid":
            header["kid"] = "not-in-jwks"
        if fault == "alg_none":
            header = {"alg": "none", "typ": "JWT"}
        elif fault == "hs256_with_public_key":
            header = {"alg": "HS256", "kid": self.key.kid, "typ": "JWT"}
        signing = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        if fault == "alg_none":
            return signing + "."
        if fault == "hs256_with_public_key":
            mac = hmac.new(self.key.public_pem(), signing.encode(), hashlib.sha256).digest()
            return f"{signing}.{b64url(mac)}"
        sig = self.key.sign(signing.encode())
        if fault == "tampered_signature":
            # the payload changed after signing: an analyst promoting themselves
            claims["groups"] = ["fraud-admins"]
            signing = signing.split(".")[0] + "." + b64url(json.dumps(claims).encode())
        return f"{signing}.{b64url(sig)}"
