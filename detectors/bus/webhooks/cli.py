"""``callshield webhooks``: run the dispatcher, manage endpoints, replay deliveries.

    callshield webhooks run
    callshield webhooks add URL [--events call.alert.*] [--allow-private]
    callshield webhooks list | dead
    callshield webhooks rotate EP [--overlap-hours 24]
    callshield webhooks enable EP | disable EP
    callshield webhooks replay EP EVENT_ID CALL_KEY

Needs the secret-encryption key (``CALLSHIELD_WEBHOOK_KEY_FILE`` or
``CALLSHIELD_WEBHOOK_KEY``) and Redis (``REDIS_URL`` or the embedded server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from typing import Any


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="deliver alerts as Standard Webhooks; manage endpoints"
    )
    act = parser.add_subparsers(dest="action", metavar="ACTION")
    act.required = True
    act.add_parser("run", help="run the dispatcher (consumer group on the alert stream)")
    add = act.add_parser("add", help="add an endpoint; prints its secret once")
    add.add_argument("url")
    add.add_argument("--events", nargs="*", default=[], help="event-type globs (default: all)")
    add.add_argument("--allow-private", action="store_true", help="allow a private target")
    add.add_argument(
        "--tenant", action="append", default=[], help="only this tenant's alerts (repeatable)"
    )
    act.add_parser("list", help="endpoints")
    act.add_parser("dead", help="dead-lettered deliveries")
    rot = act.add_parser("rotate", help="new secret; the old one signs during the overlap")
    rot.add_argument("endpoint")
    rot.add_argument("--overlap-hours", type=float, default=24.0)
    for verb in ("enable", "disable"):
        act.add_parser(verb, help=f"{verb} an endpoint").add_argument("endpoint")
    rep = act.add_parser("replay", help="deliver a delivered or dead event again")
    for arg in ("endpoint", "event_id", "call_key"):
        rep.add_argument(arg)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from detectors.bus.connect import async_client, resolve_url, sync_client
    from detectors.bus.keys import Keys
    from detectors.bus.settings import BusSettings
    from detectors.bus.webhooks.secrets import load_key
    from detectors.bus.webhooks.store import EndpointStore

    settings = BusSettings()
    key = load_key(settings)
    url = resolve_url(settings)
    keys = Keys(settings.key_prefix)
    if args.action == "run":
        return _run_dispatcher(async_client(settings, url), settings, key)
    client = sync_client(settings, url)
    store = EndpointStore(client, keys, key, settings.webhook_allow_private_targets)
    if args.action == "add":
        ep, secret = store.add(args.url, tuple(args.events), args.allow_private, tuple(args.tenant))
        print(f"{ep.id} {ep.url}\nsecret (shown once): {secret}")
    elif args.action == "list":
        for ep in store.all():
            state = "enabled" if ep.enabled else f"disabled ({ep.disabled_reason})"
            tenants = list(ep.tenants) or ["*"]
            print(f"{ep.id} {state} {ep.url} events={list(ep.event_types) or ['*']} {tenants=}")
    elif args.action == "rotate":
        print(f"new secret: {store.rotate(args.endpoint, args.overlap_hours * 3600)}")
    elif args.action in ("enable", "disable"):
        store.set_enabled(args.endpoint, args.action == "enable", "disabled by operator")
    elif args.action == "dead":
        dead: list[tuple[bytes, float]] = client.zrange(keys.wh_dead, 0, -1, withscores=True)  # type: ignore[assignment]
        for k, at in dead:
            h = {a.decode(): b.decode() for a, b in client.hgetall(k).items()}  # type: ignore[union-attr]
            print(f"{time.ctime(at)} {h.get('endpoint')} {h.get('event_id')} {h.get('call_key')}")
    elif args.action == "replay":
        return _replay(async_client(settings, url), settings, args)
    return 0


def _run_dispatcher(client: Any, settings: Any, key: Any) -> int:
    from detectors.bus.webhooks.dispatcher import Dispatcher

    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one line per request

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await Dispatcher(client, settings, key).run(stop)

    asyncio.run(main())
    return 0


def _replay(client: Any, settings: Any, args: argparse.Namespace) -> int:
    from detectors.bus.keys import Keys
    from detectors.bus.webhooks.queue import DeliveryQueue

    async def main() -> int:
        queue = DeliveryQueue(client, Keys(settings.key_prefix))
        return await queue.replay(args.endpoint, args.event_id, args.call_key, time.time())

    result = asyncio.run(main())
    print({1: "queued", 0: "no such delivery", -1: "still pending"}[result])
    return 0 if result == 1 else 1
