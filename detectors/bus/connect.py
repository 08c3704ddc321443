"""Redis clients from the settings: ``REDIS_URL`` when set (``redis://``, ``rediss://``
TLS, ``unix://``; ACL users per component as ``redis://user:password@host``, or
``redis://user@host`` with ``CALLSHIELD_REDIS_PASSWORD``), else the
embedded server (started if needed). The composition roots call these; nothing here
runs at import."""

from __future__ import annotations

import redis
import redis.asyncio

from detectors.bus.embedded import EmbeddedRedis
from detectors.bus.secret_source import resolve_secret
from detectors.bus.settings import BusSettings


def resolve_url(settings: BusSettings) -> str:
    if settings.redis_url is not None:
        return settings.redis_url.get_secret_value()
    return EmbeddedRedis(settings).ensure()


def _options(settings: BusSettings, url: str) -> dict[str, object]:
    opts: dict[str, object] = {"socket_timeout": 5.0, "socket_connect_timeout": 2.0}
    if settings.redis_password is not None and settings.redis_url is not None:
        # the ACL user's password; one in the URL takes precedence
        opts["password"] = resolve_secret(
            settings.redis_password.get_secret_value(), "CALLSHIELD_REDIS_PASSWORD"
        )
    if url.startswith("rediss://") and settings.redis_tls_ca_file is not None:
        opts["ssl_ca_certs"] = str(settings.redis_tls_ca_file)
    return opts


def sync_client(settings: BusSettings, url: str | None = None) -> redis.Redis:
    url = url or resolve_url(settings)
    return redis.Redis.from_url(url, **_options(settings, url))


def async_client(settings: BusSettings, url: str | None = None) -> redis.asyncio.Redis:
    url = url or resolve_url(settings)
    return redis.asyncio.Redis.from_url(url, **_options(settings, url))  # type: ignore[arg-type]
