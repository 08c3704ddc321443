"""Everything a Redis server holds, as bytes to search: every key and value (all types),
and the files of its data directory (AOF and RDB). For the privacy tests: what must not
be stored must not be found in any of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis


def _flatten(value: Any) -> list[bytes]:
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, str | int | float):
        return [str(value).encode()]
    if isinstance(value, dict):
        return [b for k, v in value.items() for b in (*_flatten(k), *_flatten(v))]
    if isinstance(value, list | tuple | set):
        return [b for v in value for b in _flatten(v)]
    return [] if value is None else [repr(value).encode()]


def dump_keys(client: redis.Redis) -> bytes:
    """Every key name and value, whatever its type, joined by newlines."""
    out: list[bytes] = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        value: Any
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = client.smembers(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = client.xrange(key)
        else:
            raise AssertionError(f"unexpected key type {kind} for {key!r}")
        out += [key, *_flatten(value)]
    return b"\n".join(out)


def dump_files(data_dir: Path) -> bytes:
    """Every file under the server's data directory (AOF, RDB), concatenated."""
    return b"\n".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())
