"""The dashboard's one ``Settings`` class (pydantic-settings; read when built, never at
import). Every field reads ``CALLSHIELD_DASHBOARD_<FIELD>``.

The session key comes from a file (preferred) or a secret spec (``file:/path``,
``env:VAR``; a literal only for development: ``detectors.bus.secret_source``), never
from Redis: whoever can write Redis must not be able to mint sessions.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.bus.secret_source import resolve_secret

_MIN_KEY_BYTES = 32


class DashboardSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_DASHBOARD_", extra="ignore")

    listen: str = "127.0.0.1:8080"
    # the session-signing key: a file (created 0600 with a random key when it does not
    # exist and no key is set) or a secret spec (file:/path, env:VAR, dev-only literal)
    session_key_file: Path | None = None
    session_key: SecretStr | None = None
    # Secure cookies (``__Host-`` prefix): on by default; off only for http://localhost
    cookie_secure: bool = True
    session_idle_s: int = Field(default=30 * 60, ge=10)  # sliding
    session_max_s: int = Field(default=12 * 3600, ge=60)  # absolute
    # origins the live feed accepts (ASVS 4.4.2); the listen address is always added
    allowed_origins: list[str] = Field(default_factory=list)
    login_attempts: int = Field(default=5, ge=1)  # per client address and per user ...
    login_window_s: int = Field(default=60, ge=1)  # ... in this window, then 429
    live_connects: int = Field(default=30, ge=1)  # live-feed connects per address/window
    # /api/v1 requests per principal (API key or session user) per window, then 429 with
    # Retry-After; 0: no limit. The default allows 5x the 100/s an IVR's risk lookups ask
    api_requests: int = Field(default=30_000, ge=0)
    api_window_s: int = Field(default=60, ge=1)  # seconds
    # related calls by voice: cosine of two calls' kept speaker embeddings (same model and
    # tenant) at or above this, over at most this many recent calls
    related_voice_threshold: float = Field(default=0.75, gt=0.0, le=1.0)
    related_voice_scan: int = Field(default=200, ge=0, le=5000)
    live_queue: int = Field(default=1000, ge=1)  # per client; a slower client is dropped
    # an open live-feed socket re-reads its principal this often: a tenant change made
    # through any dashboard process or the CLI re-scopes it (reconnect), a revoked key's
    # or removed user's is closed
    live_recheck_s: float = Field(default=2.0, gt=0.0, le=60.0)
    # a stop (SIGTERM/SIGINT) waits at most this long for open connections, then cancels
    shutdown_grace_s: int = Field(default=5, ge=1, le=120)
    alerts_scan: int = Field(default=2000, ge=10)  # newest alert entries the views read
    scores_scan: int = Field(default=20_000, ge=10)  # newest score entries (call timeline)
    audit_maxlen: int = Field(default=1_000_000, ge=1000)  # approximate
    # a watchlist entry added by one analyst is pending (not used by the bridges) until
    # a different analyst approves it (issue 11)
    watchlist_two_person: bool = True
    # OpenID Connect login (dashboard.oidc), on when the issuer is set; the discovery
    # document and JWKS are fetched from the issuer at each login
    oidc_issuer: str | None = None
    oidc_client_id: str = ""
    oidc_client_secret: SecretStr | None = None  # a secret spec: file:/path, env:VAR
    oidc_redirect_url: str = ""  # https://<dashboard>/api/v1/auth/oidc/callback
    oidc_scopes: str = "openid profile email"
    oidc_role_claim: str = "groups"  # a dotted path into the ID token's claims
    # claim value -> viewer|analyst|admin, e.g. '{"fraud-analysts": "analyst"}'; the
    # highest mapped role wins, a login mapping to none is refused
    oidc_role_map: dict[str, str] = Field(default_factory=dict)
    oidc_username_claim: str = "preferred_username"  # shown as oidc:<value>
    # multi-tenant platforms: a dotted path to the claim naming the user's tenants (a
    # string or a list; "*": platform-wide); a login without one is refused. Empty:
    # every OIDC user is platform-wide (a single-tenant deployment)
    oidc_tenant_claim: str = ""
    oidc_leeway_s: float = Field(default=60.0, ge=0.0, le=600.0)  # clock skew
    oidc_timeout_s: float = Field(default=5.0, gt=0.0, le=60.0)  # per provider request

    def origins(self) -> set[str]:
        """The live feed's Origin allowlist: the configured ones and the listen address."""
        host, _, port = self.listen.rpartition(":")
        scheme = "https" if self.cookie_secure else "http"
        found = {o.rstrip("/") for o in self.allowed_origins}
        found.add(f"{scheme}://{host}:{port}")
        if host in ("127.0.0.1", "::1", "localhost"):
            found.add(f"{scheme}://localhost:{port}")
            found.add(f"{scheme}://127.0.0.1:{port}")
        return found

    def load_session_key(self, state_dir: Path) -> bytes:
        """The session key: ``session_key``'s spec, the file's, or a new random key
        written 0600 to ``<state dir>/dashboard/session.key``. Short keys are refused."""
        if self.session_key is not None:
            spec = self.session_key.get_secret_value()
            key = resolve_secret(spec, "CALLSHIELD_DASHBOARD_SESSION_KEY").encode()
        else:
            path = self.session_key_file or state_dir / "dashboard" / "session.key"
            if not path.exists() and self.session_key_file is None:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_urlsafe(48))
            key = path.read_bytes().strip()
        if len(key) < _MIN_KEY_BYTES:
            raise ValueError(f"dashboard session key is shorter than {_MIN_KEY_BYTES} bytes")
        return key
