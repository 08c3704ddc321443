"""Webhook endpoints in Redis (``wh:endpoints``), shared by the dispatcher, the CLI and
the dashboard: URL, event-type and tenant filters, enabled state, and the encrypted
secrets."""

from __future__ import annotations

import re
import secrets as pysecrets
import time

import redis
from cryptography.fernet import Fernet
from pydantic import BaseModel, ConfigDict

from detectors.bus.biometrics import TENANT_PATTERN
from detectors.bus.keys import Keys
from detectors.bus.webhooks import secrets
from detectors.bus.webhooks.payload import EVENT_TYPES
from detectors.bus.webhooks.ssrf import BlockedTarget, check_url


class Endpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    url: str
    event_types: tuple[str, ...] = ()  # glob patterns; empty: every event type
    # alerts of these tenants only (system events, which have no tenant, are then not
    # delivered); empty: every tenant's alerts and the system events
    tenants: tuple[str, ...] = ()
    enabled: bool = True
    disabled_reason: str = ""
    allow_private: bool = False
    secrets: tuple[str, ...]  # Fernet tokens, newest first
    previous_until: float = 0.0  # wall time until which older secrets also sign
    created_at: float = 0.0

    def live_secrets(self, key: Fernet, now: float) -> list[str]:
        tokens = self.secrets if now < self.previous_until else self.secrets[:1]
        return [secrets.decrypt(key, t) for t in tokens]


def check_tenants(tenants: tuple[str, ...]) -> None:
    bad = [t for t in tenants if not re.match(TENANT_PATTERN, t)]
    if bad or len(tenants) > 64:
        raise ValueError(f"invalid tenant filter {bad or '(over 64 tenants)'}")


def wants(endpoint: Endpoint, tenant: str | None) -> bool:
    """Whether the endpoint's tenant filter lets a message of ``tenant`` (None: a
    system event) through."""
    return not endpoint.tenants or (tenant is not None and tenant in endpoint.tenants)


def check_event_types(event_types: tuple[str, ...]) -> None:
    unknown = [p for p in event_types if not any(p == t or "*" in p for t in (*EVENT_TYPES, "*"))]
    if unknown:
        raise ValueError(f"unknown event types {unknown}; known: {list(EVENT_TYPES)}")


def new_endpoint(
    key: Fernet,
    url: str,
    event_types: tuple[str, ...] = (),
    allow_private: bool = False,
    allow_private_targets: bool = False,
    tenants: tuple[str, ...] = (),
) -> tuple[Endpoint, str]:
    """A checked new endpoint record and its secret (the CLI's and the dashboard's add):
    SSRF-checked URL (resolves the host), known event types, private targets only where
    the deployment allows them."""
    if allow_private and not allow_private_targets:
        raise BlockedTarget(
            "private webhook targets are disabled (CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS)"
        )
    check_url(url, allow_private)
    check_event_types(event_types)
    check_tenants(tenants)
    secret = secrets.new_secret()
    endpoint = Endpoint(
        id="ep_" + pysecrets.token_hex(8),
        url=url,
        event_types=event_types,
        tenants=tuple(sorted(set(tenants))),
        allow_private=allow_private,
        secrets=(secrets.encrypt(key, secret),),
        created_at=time.time(),
    )
    return endpoint, secret


def rotated(key: Fernet, endpoint: Endpoint, overlap_s: float) -> tuple[Endpoint, str]:
    """``endpoint`` with a new secret first; the previous one signs for ``overlap_s``."""
    secret = secrets.new_secret()
    update = {
        "secrets": (secrets.encrypt(key, secret), endpoint.secrets[0]),
        "previous_until": time.time() + overlap_s,
    }
    return endpoint.model_copy(update=update), secret


class EndpointStore:
    def __init__(
        self, client: redis.Redis, keys: Keys, key: Fernet, allow_private_targets: bool
    ) -> None:
        self._client = client
        self._keys = keys
        self._key = key
        self._allow_private_targets = allow_private_targets

    def add(
        self,
        url: str,
        event_types: tuple[str, ...] = (),
        allow_private: bool = False,
        tenants: tuple[str, ...] = (),
    ) -> tuple[Endpoint, str]:
        """Create an endpoint; returns it and its secret (shown once, stored encrypted)."""
        endpoint, secret = new_endpoint(
            self._key, url, event_types, allow_private, self._allow_private_targets, tenants
        )
        self._save(endpoint)
        return endpoint, secret

    def get(self, endpoint_id: str) -> Endpoint | None:
        raw = self._client.hget(self._keys.wh_endpoints, endpoint_id)
        return Endpoint.model_validate_json(raw) if raw else None

    def all(self) -> list[Endpoint]:
        raw = self._client.hgetall(self._keys.wh_endpoints)
        return sorted((Endpoint.model_validate_json(v) for v in raw.values()), key=lambda e: e.id)

    def rotate(self, endpoint_id: str, overlap_s: float = 24 * 3600.0) -> str:
        """A new secret; the previous one keeps signing for ``overlap_s``."""
        endpoint, secret = rotated(self._key, self._require(endpoint_id), overlap_s)
        self._save(endpoint)
        return secret

    def set_enabled(self, endpoint_id: str, enabled: bool, reason: str = "") -> Endpoint:
        endpoint = self._require(endpoint_id).model_copy(
            update={"enabled": enabled, "disabled_reason": "" if enabled else reason}
        )
        self._save(endpoint)
        if enabled:  # resume the queues parked while it was disabled
            parked = self._client.smembers(self._keys.wh_parked)
            names = [m.decode() if isinstance(m, bytes) else m for m in parked]
            mine = [m for m in names if m.startswith(f"{endpoint_id}|")]
            if mine:
                now = time.time()
                self._client.zadd(self._keys.wh_due, {m: now for m in mine})
                self._client.srem(self._keys.wh_parked, *mine)
        return endpoint

    def delete(self, endpoint_id: str) -> bool:
        return bool(self._client.hdel(self._keys.wh_endpoints, endpoint_id))

    def _require(self, endpoint_id: str) -> Endpoint:
        endpoint = self.get(endpoint_id)
        if endpoint is None:
            raise KeyError(f"no webhook endpoint {endpoint_id}")
        return endpoint

    def _save(self, endpoint: Endpoint) -> None:
        self._client.hset(self._keys.wh_endpoints, endpoint.id, endpoint.model_dump_json())
