"""SSRF checks at creation and send time, no redirects, secrets encrypted at rest."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
import redis
from cryptography.fernet import Fernet
from receiver import Receiver

from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks import secrets
from detectors.bus.webhooks.sender import Sender
from detectors.bus.webhooks.ssrf import BlockedTarget, address_problem, check_url, parse_target
from detectors.bus.webhooks.store import EndpointStore


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "private"),
        ("224.0.0.1", "multicast"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_classification(address: str, problem: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/x", "scheme must be http or https"),
        ("http://user:pw@93.184.216.34/", "must not carry credentials"),
        ("http:///path", "has no host"),
        ("http://127.0.0.1:8080/hook", "loopback address 127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("https://[::1]/", "loopback"),
        ("http://localhost/", "loopback"),
    ],
)
def test_blocked_urls(url: str, message: str) -> None:
    with pytest.raises(BlockedTarget, match=message):
        check_url(url, allow_private=False)


def test_public_literal_passes_and_private_needs_the_flag() -> None:
    target, address = check_url("https://93.184.216.34:8443/h?x=1", allow_private=False)
    assert (target.port, target.path, address) == (8443, "/h?x=1", "93.184.216.34")
    assert check_url("http://127.0.0.1:9/", allow_private=True)[1] == "127.0.0.1"
    assert parse_target("http://example.com").path == "/"


def _store(client: redis.Redis, gate: bool) -> tuple[EndpointStore, Fernet]:
    key = Fernet(Fernet.generate_key())
    return EndpointStore(client, Keys("sec:"), key, gate), key


def test_creation_refuses_private_targets_unless_allowed(client: redis.Redis) -> None:
    store, _ = _store(client, gate=False)
    with pytest.raises(BlockedTarget, match="loopback"):
        store.add("http://127.0.0.1:9/hook")
    with pytest.raises(BlockedTarget, match="private webhook targets are disabled"):
        store.add("http://127.0.0.1:9/hook", allow_private=True)
    store, _ = _store(client, gate=True)
    ep, _ = store.add("http://127.0.0.1:9/hook", allow_private=True)
    assert ep.allow_private
    with pytest.raises(ValueError, match="unknown event types"):
        store.add("http://127.0.0.1:9/hook", event_types=("call.ended",), allow_private=True)


def test_secrets_are_encrypted_at_rest(client: redis.Redis) -> None:
    store, key = _store(client, gate=True)
    ep, secret = store.add("http://127.0.0.1:9/hook", allow_private=True)
    assert secret.startswith("whsec_")
    raw = client.hget(Keys("sec:").wh_endpoints, ep.id)
    assert raw is not None and secret.encode() not in raw
    assert ep.live_secrets(key, 0.0) == [secret]
    with pytest.raises(ValueError, match="does not decrypt"):
        secrets.decrypt(Fernet(Fernet.generate_key()), ep.secrets[0])
    with pytest.raises(ValueError, match="no webhook secret key"):
        secrets.load_key(BusSettings(webhook_key=None, webhook_key_file=None))


def test_send_time_check_and_no_redirects(client: redis.Redis) -> None:
    store, key = _store(client, gate=True)
    rx = Receiver(status=302)
    try:
        ep, secret = store.add(rx.url, allow_private=True)
        rx.secrets = [secret]

        async def go() -> tuple[int | None, str, int | None]:
            # the dispatcher's own gate is off: blocked at send time, nothing sent
            closed = Sender(key, allow_private_targets=False)
            blocked = await closed.send(ep, "msg_1", "{}", 1.0)
            await closed.aclose()
            sender = Sender(key, allow_private_targets=True)
            redirected = await sender.send(ep, "msg_1", "{}", 1.0)
            await sender.aclose()
            return blocked.status, blocked.error, redirected.status

        status, error, redirected = asyncio.run(go())
        assert status is None and error.startswith("blocked: ") and "loopback" in error
        assert redirected == 302  # a failure, and the Location was not followed
        assert rx.requests == 1
    finally:
        rx.close()
