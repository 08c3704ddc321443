"""Dashboard login through an OpenID Connect provider: the authorization code flow with
PKCE (RFC 7636, S256), ``state`` and ``nonce`` checked, the ID token verified against
the provider's JWKS (``dashboard.oidc_tokens``).

- ``OidcConfig``: from ``DashboardSettings.oidc_*``; the client secret is a secret spec
  (``file:``, ``env:``; a literal only for development), never Redis. The issuer must be
  https (plain http only on a loopback address, for development and tests).
- ``OidcClient``: the provider's discovery document and JWKS are fetched at login time
  (keys the provider rotates are picked up by the next login), the code is exchanged at
  the token endpoint (``client_secret_basic`` with a secret, else a public client).
- ``LoginStates``: one pending login per ``state`` in Redis (``dash:oidc:<state>``, TTL
  10 minutes, read once): the nonce, the PKCE verifier and a hash of the value of a
  cookie set on the browser that started it, so a callback from any other browser is
  refused (login CSRF).
- ``map_role``: the highest dashboard role the configured claim (a dotted path, e.g.
  ``groups`` or ``realm_access.roles``; a string or a list) maps to; none: refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import redis.asyncio

from dashboard.auth import Role, check_username
from dashboard.keys import DashKeys
from dashboard.oidc_tokens import Expected, OidcError, pkce_challenge, verify_id_token
from dashboard.settings import DashboardSettings
from dashboard.tenancy import Tenants, parse_tenants
from detectors.bus.secret_source import resolve_secret

STATE_TTL_S = 600
_MAX_DOC_BYTES = 256 * 1024


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    secure = parts.scheme == "https" or (parts.scheme == "http" and _loopback(parts.hostname))
    if secure and parts.hostname:
        return url
    raise ValueError(f"{what} must be an https URL (http only on a loopback address): {url!r}")


@dataclass(frozen=True, slots=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str | None
    redirect_url: str
    scopes: str
    role_claim: str
    role_map: dict[str, Role]
    username_claim: str
    tenant_claim: str
    leeway_s: float
    timeout_s: float

    @classmethod
    def from_settings(cls, s: DashboardSettings) -> OidcConfig | None:
        """None when OIDC is not configured; ``ValueError`` when it is, but wrongly."""
        if not s.oidc_issuer:
            return None
        if not s.oidc_client_id:
            raise ValueError("oidc_client_id is required with oidc_issuer")
        if not s.oidc_redirect_url:
            raise ValueError("oidc_redirect_url is required with oidc_issuer")
        if not s.oidc_role_map:
            raise ValueError("oidc_role_map is required with oidc_issuer (claim value -> role)")
        if "openid" not in s.oidc_scopes.split():
            raise ValueError("oidc_scopes must include openid")
        secret = None
        if s.oidc_client_secret is not None:
            spec = s.oidc_client_secret.get_secret_value()
            secret = resolve_secret(spec, "CALLSHIELD_DASHBOARD_OIDC_CLIENT_SECRET")
        return cls(
            issuer=check_url(s.oidc_issuer, "oidc_issuer"),
            client_id=s.oidc_client_id,
            client_secret=secret,
            redirect_url=check_url(s.oidc_redirect_url, "oidc_redirect_url"),
            scopes=s.oidc_scopes,
            role_claim=s.oidc_role_claim,
            role_map={k: Role.parse(v) for k, v in s.oidc_role_map.items()},
            username_claim=s.oidc_username_claim,
            tenant_claim=s.oidc_tenant_claim,
            leeway_s=s.oidc_leeway_s,
            timeout_s=s.oidc_timeout_s,
        )


@dataclass(frozen=True, slots=True)
class ProviderMeta:
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


class OidcClient:
    def __init__(self, config: OidcConfig) -> None:
        self.config = config

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.config.timeout_s, follow_redirects=False)

    async def _get_json(self, client: httpx.AsyncClient, url: str, what: str) -> dict[str, Any]:
        try:
            resp = await client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise OidcError(
                f"identity provider unreachable ({what}: {type(exc).__name__})"
            ) from None
        return _json_body(resp, what)

    async def discover(self, client: httpx.AsyncClient) -> ProviderMeta:
        url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
        doc = await self._get_json(client, url, "discovery")
        if doc.get("issuer") != self.config.issuer:
            raise OidcError("discovery document names another issuer")
        methods = doc.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise OidcError("identity provider does not support PKCE S256")
        try:
            return ProviderMeta(
                check_url(str(doc["authorization_endpoint"]), "authorization_endpoint"),
                check_url(str(doc["token_endpoint"]), "token_endpoint"),
                check_url(str(doc["jwks_uri"]), "jwks_uri"),
            )
        except (KeyError, ValueError) as exc:
            raise OidcError(f"discovery document unusable: {exc}") from None

    async def authorization_url(self, state: str, nonce: str, verifier: str) -> str:
        async with self._client() as client:
            meta = await self.discover(client)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.config.client_id,
                "redirect_uri": self.config.redirect_url,
                "scope": self.config.scopes,
                "state": state,
                "nonce": nonce,
                "code_challenge": pkce_challenge(verifier),
                "code_challenge_method": "S256",
            }
        )
        sep = "&" if urlsplit(meta.authorization_endpoint).query else "?"
        return f"{meta.authorization_endpoint}{sep}{query}"

    async def exchange(self, code: str, verifier: str, nonce: str, now: float) -> dict[str, Any]:
        """The verified ID token claims for an authorization code."""
        cfg = self.config
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": cfg.redirect_url,
            "code_verifier": verifier,
        }
        auth: httpx.Auth | None = None
        if cfg.client_secret is not None:
            auth = httpx.BasicAuth(_form_escape(cfg.client_id), _form_escape(cfg.client_secret))
        else:
            form["client_id"] = cfg.client_id
        async with self._client() as client:
            meta = await self.discover(client)
            try:
                resp = await (
                    client.post(meta.token_endpoint, data=form, auth=auth)
                    if auth is not None
                    else client.post(meta.token_endpoint, data=form)
                )
            except httpx.HTTPError as exc:
                raise OidcError(f"token endpoint unreachable ({type(exc).__name__})") from None
            tokens = _json_body(resp, "token response")
            jwks = await self._get_json(client, meta.jwks_uri, "JWKS")
        want = Expected(cfg.issuer, cfg.client_id, nonce, now, cfg.leeway_s)
        return verify_id_token(str(tokens.get("id_token", "")), jwks, want)


def _form_escape(value: str) -> str:
    """RFC 6749 §2.3.1: client id and secret are form-urlencoded inside Basic auth."""
    return urlencode({"": value})[1:]


def _json_body(resp: httpx.Response, what: str) -> dict[str, Any]:
    if resp.status_code != 200:
        error = ""
        with contextlib.suppress(ValueError, AttributeError):
            error = str(resp.json().get("error", ""))[:80]
        raise OidcError(f"{what}: HTTP {resp.status_code} {error}".rstrip())
    if len(resp.content) > _MAX_DOC_BYTES:
        raise OidcError(f"{what} is too large")
    try:
        doc = resp.json()
    except ValueError:
        raise OidcError(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise OidcError(f"{what} is not a JSON object")
    return doc


def claim_at(claims: dict[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def map_role(claims: dict[str, Any], path: str, mapping: dict[str, Role]) -> Role | None:
    """The highest role the claim's values map to (None: no value maps)."""
    raw = claim_at(claims, path)
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    roles = [mapping[v] for v in values if isinstance(v, str) and v in mapping]
    return max(roles, default=None)


def map_tenants(claims: dict[str, Any], path: str) -> tuple[Tenants, str]:
    """(the user's tenants, "") or (None, why the login is refused). No ``path``:
    platform-wide; a ``*`` value: platform-wide; else the named tenants."""
    if not path:
        return None, ""
    raw = claim_at(claims, path)
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    names = [v for v in values if isinstance(v, str)]
    if "*" in names:
        return None, ""
    try:
        tenants = parse_tenants(names)
    except ValueError as exc:
        return frozenset(), str(exc)
    if tenants is None:
        return frozenset(), f"no {path} value names a tenant"
    return tenants, ""


def username(claims: dict[str, Any], claim: str) -> str:
    """``oidc:<name>`` from the configured claim, else from a hash of ``sub``: never
    the same name as a local account, so the two-person rule sees two people."""
    value = claim_at(claims, claim)
    if isinstance(value, str):
        try:
            return "oidc:" + check_username(value)
        except ValueError:
            pass
    return "oidc:sub-" + hashlib.sha256(str(claims.get("sub")).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PendingLogin:
    nonce: str
    verifier: str
    binding: str  # sha256 of the browser cookie's value


class LoginStates:
    def __init__(self, client: redis.asyncio.Redis, keys: DashKeys) -> None:
        self._r, self._k = client, keys

    @staticmethod
    def binding_of(cookie: str) -> str:
        return hashlib.sha256(cookie.encode()).hexdigest()

    async def begin(self, cookie: str) -> tuple[str, PendingLogin]:
        state = secrets.token_urlsafe(32)
        pending = PendingLogin(
            secrets.token_urlsafe(32), secrets.token_urlsafe(48), self.binding_of(cookie)
        )
        body = {"nonce": pending.nonce, "verifier": pending.verifier, "binding": pending.binding}
        await self._r.set(self._k.oidc(state), json.dumps(body), ex=STATE_TTL_S)
        return state, pending

    async def finish(self, state: str) -> PendingLogin | None:
        """The pending login of ``state``, removed (a state is good for one callback)."""
        if not state or len(state) > 128:
            return None
        async with self._r.pipeline(transaction=True) as p:
            p.get(self._k.oidc(state))
            p.delete(self._k.oidc(state))
            body, _ = await p.execute()
        if body is None:
            return None
        record = json.loads(body)
        return PendingLogin(record["nonce"], record["verifier"], record["binding"])
