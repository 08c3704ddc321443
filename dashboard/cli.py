"""``callshield dashboard``: serve the web process, or bootstrap its users and keys.

  callshield dashboard [--listen 127.0.0.1:8080]
  callshield dashboard create-user NAME [--role admin] [--password-stdin] [--tenant T ...]
  callshield dashboard create-api-key NAME [--role viewer] [--tenant T ...]
  callshield dashboard principals [--platform-wide]
  callshield dashboard set-tenants (--user NAME | --api-key ID) (--tenant T ... | --platform-wide)

``--tenant`` (repeatable) limits the principal to those tenants; without it the
principal is platform-wide (this CLI talks to Redis directly: it is the operator's).
``principals --platform-wide`` lists the users and keys that see every tenant (those
created before tenancy are); ``set-tenants`` replaces one's tenant set, audited as
``cli``; a user's live sessions re-read it at their next request, and every dashboard
process re-scopes (closes) its open live-feed sockets within ``live_recheck_s``.

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
    listing = actions.add_parser("principals", help="list users and API keys with their tenants")
    listing.add_argument(
        "--platform-wide", action="store_true", help="only those that see every tenant"
    )
    listing.set_defaults(run=list_principals)
    scope = actions.add_parser("set-tenants", help="replace a user's or API key's tenant set")
    target = scope.add_mutually_exclusive_group(required=True)
    target.add_argument("--user", help="a username")
    target.add_argument("--api-key", help="an API key's id")
    tenants = scope.add_mutually_exclusive_group(required=True)
    tenants.add_argument("--tenant", action="append", help="limit to this tenant (repeatable)")
    tenants.add_argument(
        "--platform-wide", action="store_true", help="every tenant (no tenant set)"
    )
    scope.set_defaults(run=set_tenants)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(args: argparse.Namespace) -> int:
    import signal

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
    # uvicorn (0.29+) stops gracefully on SIGTERM, then restores the handler it found and
    # raises the signal again: into this one, so the operator's ordinary stop exits 0
    # (not -15) once the graceful shutdown has run; before uvicorn starts it exits at once
    signal.signal(signal.SIGTERM, _stop)
    uvicorn.run(
        app,
        host=host.strip("[]"),
        port=int(port),
        log_config=None,
        server_header=False,
        # the live feed sends each message to every client: deflating it per client
        # costs more CPU than the few hundred bytes it saves (callshield bench dashboard)
        ws_per_message_deflate=False,
        # a stop waits this long for open connections (a live-feed client that stopped
        # reading keeps its socket's unsent buffer forever), then cancels them: without
        # it a stalled WebSocket client made SIGTERM hang
        timeout_graceful_shutdown=settings.shutdown_grace_s,
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


def list_principals(args: argparse.Namespace) -> int:
    from dashboard.tenancy import label
    from dashboard.tenant_check import principals

    async def go() -> list[dict[str, Any]]:
        client, users, keys = await _stores()
        try:
            return await principals(users, keys)
        finally:
            await client.aclose()

    for p in asyncio.run(go()):
        if args.platform_wide and p["tenants"] is not None:
            continue
        ident = p.get("id", "-")
        tenants = label(None if p["tenants"] is None else frozenset(p["tenants"]))
        print(f"{p['kind']}\t{p['name']}\t{ident}\t{p['role']}\t{tenants}")
    return 0


def set_tenants(args: argparse.Namespace) -> int:
    from dashboard.audit import AuditLog
    from dashboard.keys import DashKeys
    from dashboard.tenancy import dump_tenants, parse_tenants
    from detectors.bus.keys import Keys
    from detectors.bus.settings import BusSettings

    async def go() -> str:
        tenants = None if args.platform_wide else parse_tenants(args.tenant)
        client, users, keys = await _stores()
        audit = AuditLog(client, DashKeys(Keys(BusSettings().key_prefix)), _now, 100_000)
        try:
            if args.user:
                found = await users.set_tenants(args.user, tenants)
                if found is None:
                    raise ValueError(f"no user {args.user!r}")
                action, target, extra = "user.tenants", args.user, {}
                old = found[1]
            else:
                got = await keys.set_tenants(args.api_key, tenants)
                if got is None:
                    raise ValueError(f"no API key {args.api_key!r}")
                action, target, extra = "api_key.tenants", args.api_key, {"name": got[0]}
                old = got[2]
            await audit.record_as(
                "cli",
                "admin",
                "cli",
                action,
                target,
                audit_tenant="*",
                tenants=dump_tenants(tenants),
                before=dump_tenants(old),
                **extra,
            )
        finally:
            await client.aclose()
        return f"{target}: {dump_tenants(old) or '*'} -> {dump_tenants(tenants) or '*'}"

    try:
        print(asyncio.run(go()))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _now() -> float:
    import time

    return time.time()
