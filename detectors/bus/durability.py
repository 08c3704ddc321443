"""Strict durability: after a batch of alerts, wait until it is on disk or on replicas.

Redis >= 7.2 has ``WAITAOF numlocal numreplicas timeout``: it returns once this
connection's writes are fsynced to the local AOF (and to N replicas' AOFs). Older
servers (Debian 12's 7.0) lack it: with replicas we fall back to ``WAIT n`` (received by
the replicas, not necessarily on their disk); without, we rely on the server running
``appendfsync always`` (what the embedded server does in strict mode) and say so once in
the log. In ``normal`` durability nothing is awaited: AOF ``everysec`` survives a crash of
the Redis process, not of the host.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import redis

log = logging.getLogger(__name__)

Mode = Literal["none", "waitaof", "wait", "fsync_always", "unverified"]


class StrictWaiter:
    """Decides once per connection epoch how strict mode is enforced, then enforces it."""

    def __init__(self, strict: bool, timeout_ms: int) -> None:
        self.strict = strict
        self.timeout_ms = timeout_ms
        self.mode: Mode = "none"
        self._replicas = 0
        self._probed = False

    def reset(self) -> None:
        """The server may have changed (restart, failover): probe again next time."""
        self._probed = False

    def _probe(self, client: redis.Redis) -> None:
        self._probed = True
        if not self.strict:
            self.mode = "none"
            return
        info: dict[str, Any] = client.info("server")
        version = str(info.get("redis_version", "0"))
        major, minor = (int(x) for x in [*version.split("."), "0", "0"][:2])
        if (major, minor) >= (7, 2):
            self.mode = "waitaof"
            return
        repl: dict[str, Any] = client.info("replication")
        self._replicas = int(repl.get("connected_slaves", 0))
        if self._replicas > 0:
            self.mode = "wait"
            log.warning(
                "strict durability: Redis %s has no WAITAOF (needs 7.2); using WAIT %d "
                "(replica receipt, not replica fsync)",
                version,
                self._replicas,
            )
            return
        fsync = ""
        try:
            fsync = str(client.config_get("appendfsync").get("appendfsync", ""))
        except redis.ResponseError:  # CONFIG may be denied to this ACL user
            fsync = ""
        if fsync == "always":
            self.mode = "fsync_always"
            log.warning(
                "strict durability: Redis %s has no WAITAOF (needs 7.2) and no replica; "
                "relying on its appendfsync always",
                version,
            )
        else:
            self.mode = "unverified"
            log.error(
                "strict durability unavailable: Redis %s has no WAITAOF (needs 7.2), no "
                "replica, and appendfsync is %r, not always: a host crash can lose ~1 s "
                "of alerts. Upgrade Redis, add a replica or set appendfsync always.",
                version,
                fsync or "unknown",
            )

    def wait(self, client: redis.Redis) -> None:
        """Block until the last writes on ``client`` are durable per the mode; raise
        ``redis.RedisError`` when they are not (the caller keeps them and retries)."""
        if not self._probed:
            self._probe(client)
        if self.mode == "waitaof":
            local, _replicas = client.execute_command(  # type: ignore[no-untyped-call]
                "WAITAOF", 1, 0, self.timeout_ms
            )
            if int(local) < 1:
                raise redis.RedisError("WAITAOF: write not fsynced to the local AOF in time")
        elif self.mode == "wait":
            acked = int(
                client.execute_command(  # type: ignore[no-untyped-call]
                    "WAIT", self._replicas, self.timeout_ms
                )
            )
            if acked < 1:
                raise redis.RedisError("WAIT: no replica acknowledged the write in time")
