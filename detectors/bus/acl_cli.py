"""``callshield redis-acl``: one Redis ACL user per component (``detectors.bus.acl``).

    callshield redis-acl --password-dir /etc/callshield/redis-acl          # apply
    callshield redis-acl --password bridge=file:/run/secrets/redis-bridge ...
    callshield redis-acl --print --password-dir DIR > users.acl             # ACL file

Applies with ``ACL SETUSER`` through ``REDIS_URL`` (an administrator's connection; the
embedded server when unset), or prints ACL file lines instead (``--print``; nothing is
sent, commands newer than ``--redis-version`` are left out). Passwords: ``--password
NAME=SPEC`` (``file:/path``, ``env:VAR``; a literal only for development), else
``<password-dir>/<NAME>.password``, created 0600 with a random password when missing.
Each component then connects as ``redis://NAME@host:port/0`` with
``CALLSHIELD_REDIS_PASSWORD=file:<that file>`` (or the password in the URL).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import redis

from detectors.bus.acl import Component, acl_file_line, components, parse_version, rules
from detectors.bus.secret_source import resolve_secret
from detectors.bus.settings import BusSettings

_NAMES = ("bridge", "dashboard", "webhooks", "retention")


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="create one Redis ACL user per component (least privilege)"
    )
    parser.add_argument(
        "--component",
        action="append",
        choices=_NAMES,
        help="only this component (repeatable; default: all)",
    )
    parser.add_argument(
        "--password",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="a component's password: file:/path, env:VAR (a literal: development only)",
    )
    parser.add_argument(
        "--password-dir",
        type=Path,
        help="NAME.password files; a missing one is created (0600, random password)",
    )
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print ACL file lines instead of applying them",
    )
    parser.add_argument(
        "--redis-version",
        default="7.0",
        help="with --print: the server's version (commands newer than it are left out)",
    )
    parser.add_argument(
        "--save", action="store_true", help="ACL SAVE after applying (server needs an aclfile)"
    )
    parser.set_defaults(run=run)


def _password_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.password"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        print(f"{name}: new password in {path}", file=sys.stderr)
    return path


def passwords(names: list[str], specs: list[str], folder: Path | None) -> dict[str, str]:
    """Each component's password, from ``NAME=SPEC`` arguments or the folder."""
    given: dict[str, str] = {}
    for item in specs:
        name, sep, spec = item.partition("=")
        if not sep or name not in _NAMES:
            raise ValueError(f"--password wants NAME=SPEC with NAME one of {list(_NAMES)}")
        given[name] = spec
    out: dict[str, str] = {}
    for name in names:
        if name in given:
            out[name] = resolve_secret(given[name], f"the {name} user's password")
        elif folder is not None:
            spec = f"file:{_password_file(folder, name)}"
            out[name] = resolve_secret(spec, f"the {name} user's password")
        else:
            raise ValueError(
                f"no password for {name}: --password {name}=file:/path or --password-dir DIR"
            )
    return out


def apply(client: Any, chosen: list[Component], pw: dict[str, str], save: bool) -> list[str]:
    """``ACL SETUSER`` each component on ``client`` (an administrator's connection);
    returns warnings about the server's other users."""
    version = parse_version(str(client.info("server")["redis_version"]))
    for c in chosen:
        client.execute_command("ACL", "SETUSER", c.name, *rules(c, pw[c.name], version))
    if save:
        client.execute_command("ACL", "SAVE")
    warnings = []
    default: Any = client.acl_getuser("default") or {}
    flags = [f.decode() if isinstance(f, bytes) else str(f) for f in default.get("flags", [])]
    if "on" in flags and "nopass" in flags:
        warnings.append(
            "the default user is on without a password: whoever reaches this Redis has "
            "every right, whatever the component users may do. Give it a password or "
            "turn it off (after moving the administrator to a user of its own)."
        )
    return warnings


def run(args: argparse.Namespace) -> int:
    settings = BusSettings()
    names = list(dict.fromkeys(args.component or _NAMES))
    table = components(settings.key_prefix)
    chosen = [table[n] for n in names]
    try:
        pw = passwords(names, args.password, args.password_dir)
        if args.print_only:
            version = parse_version(args.redis_version)
            for c in chosen:
                print(acl_file_line(c, pw[c.name], version))
            return 0
        from detectors.bus.connect import sync_client

        client = sync_client(settings)
        try:
            warnings = apply(client, chosen, pw, args.save)
        finally:
            client.close()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"error: redis: {exc}", file=sys.stderr)
        return 1
    for c in chosen:
        print(f"{c.name}: {c.purpose}")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0
