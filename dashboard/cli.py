"""``callshield dashboard``: serve the web process, or bootstrap its users and keys.

  callshield dashboard [--listen 127.0.0.1:8080]
  callshield dashboard create-user NAME [--role admin] [--password-stdin] [--tenant T ...]
  callshield dashboard create-api-key NAME [--role viewer] [--tenant T ...]

``--tenant`` (repeatable) limits the principal to those tenants; without it the
principal is platform-wide (this CLI talks to Redis directly: it is the operator's).

Nothing heavy is imported until a command runs (the CLI root loads this module on every
``callshield`` invocation).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

_ROLES = ("viewer", "analyst", "admin")


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="the analysts' web dashboard and REST API"
    )
    parser.add_argument("--listen", default=None, help="HOST:PORT (default 127.0.0.1:8080)")
    parser.set_defaults(run=serve)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    user = actions.add_parser("create-user", help="create a person's login (e.g. the first admin)")
    user.add_argument("username")
    user.add_argument("--role", choices=_ROLES, default="admin")
    user.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    user.add_argument("--tenant", action="append", help="limit to this tenant (repeatable)")
    user.set_defaults(run=create_user)
    key = actions.add_parser("create-api-key", help="create an API key for a machine")
    key.add_argument("name")
    key.add_argument("--role", choices=_ROLES, default="viewer")
    key.add_argument("--tenant", action="append", help="limit to this tenant (repeatable)")
    key.set_defaults(run=create_api_key)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from dashboard.app import create_app
    from dashboard.masking import install_redaction
    from dashboard.settings import DashboardSettings

    settings = DashboardSettings()
    if args.listen:
        settings = settings.model_copy(update={"listen": args.listen})
    host, _, port = settings.listen.rpartition(":")
    app = create_app(settings)
    install_redaction("uvicorn", "uvicorn.access", "uvicorn.error", "dashboard")
    uvicorn.run(
        app,
        host=host.strip("[]"),
        port=int(port),
        log_config=None,
        server_header=False,
        # the live feed sends each message to every client: deflating it per client
        # costs more CPU than the few hundred bytes it saves (callshield bench dashboard)
        ws_per_message_deflate=False,
    )
    return 0


async def _stores() -> tuple[Any, Any, Any]:
    import time

    from dashboard.auth import ApiKeyStore, UserStore
    from dashboard.keys import DashKeys
    from detectors.bus.connect import async_client
    from detectors.bus.keys import Keys
    from detectors.bus.settings import BusSettings

    bus = BusSettings()
    client = async_client(bus)
    keys = DashKeys(Keys(bus.key_prefix))
    return client, UserStore(client, keys, time.time), ApiKeyStore(client, keys, time.time)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the passwords differ")
    return first


def create_user(args: argparse.Namespace) -> int:
    from dashboard.auth import Role
    from dashboard.tenancy import parse_tenants

    async def go() -> None:
        tenants = parse_tenants(args.tenant)
        client, users, _ = await _stores()
        try:
            await users.create(
                args.username, _read_password(args.password_stdin), Role.parse(args.role), tenants
            )
        finally:
            await client.aclose()

    try:
        asyncio.run(go())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"created {args.role} {args.username}")
    return 0


def create_api_key(args: argparse.Namespace) -> int:
    from dashboard.auth import Role
    from dashboard.tenancy import parse_tenants

    async def go() -> str:
        tenants = parse_tenants(args.tenant)
        client, _, keys = await _stores()
        try:
            _, key = await keys.create(args.name, Role.parse(args.role), tenants)
        finally:
            await client.aclose()
        return str(key)

    try:
        print(asyncio.run(go()))  # shown once; stored only as its SHA-256
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
