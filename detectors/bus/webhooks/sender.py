"""One HTTP attempt: SSRF check and resolution at send time, the connection pinned to
the checked address (Host header and TLS SNI keep the name), Standard Webhooks headers
signed by the ``standardwebhooks`` library with every live secret of the endpoint, no
redirects, no proxies from the environment."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from cryptography.fernet import Fernet
from standardwebhooks import Webhook

from detectors.bus.webhooks.ssrf import BlockedTarget, parse_target, resolve
from detectors.bus.webhooks.store import Endpoint

USER_AGENT = "CallShield-Webhooks/1"


@dataclass(frozen=True, slots=True)
class Attempt:
    status: int | None  # None: no HTTP response (blocked, refused, timeout)
    error: str = ""
    retry_after: float | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def signature_header(secrets: list[str], msg_id: str, at: datetime, body: str) -> str:
    return " ".join(Webhook(s).sign(msg_id=msg_id, timestamp=at, data=body) for s in secrets)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # HTTP-date form: ignored, the schedule applies


class Sender:
    def __init__(self, key: Fernet, allow_private_targets: bool) -> None:
        self._key = key
        self._allow_private = allow_private_targets
        self._http = httpx.AsyncClient(follow_redirects=False, trust_env=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, endpoint: Endpoint, msg_id: str, body: str, timeout_s: float) -> Attempt:
        start = time.perf_counter()
        allow = endpoint.allow_private and self._allow_private
        try:
            target = parse_target(endpoint.url)
            address = await asyncio.get_running_loop().run_in_executor(
                None, resolve, target.host, target.port, allow
            )
        except BlockedTarget as exc:
            return Attempt(None, f"blocked: {exc}")
        now = datetime.now(UTC)  # the receiver checks this against its own clock
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature_header(
                endpoint.live_secrets(self._key, time.time()), msg_id, now, body
            ),
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        default_port = 443 if target.scheme == "https" else 80
        host = f"[{target.host}]" if ":" in target.host else target.host
        headers["host"] = host if target.port == default_port else f"{host}:{target.port}"
        literal = f"[{address}]" if ":" in address else address
        url = f"{target.scheme}://{literal}:{target.port}{target.path}"
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        try:
            response = await self._http.post(
                url,
                content=body.encode(),
                headers=headers,
                timeout=timeout_s,
                extensions=extensions,
            )
        except httpx.HTTPError as exc:
            return Attempt(None, f"{type(exc).__name__}: {exc}", None, time.perf_counter() - start)
        return Attempt(
            response.status_code,
            "" if response.is_success else f"HTTP {response.status_code}",
            _retry_after(response.headers.get("retry-after")),
            time.perf_counter() - start,
        )
