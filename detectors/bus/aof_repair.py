"""Repair a torn AOF before ``redis-server`` loads it.

A Redis killed while writing (SIGKILL, power loss) can leave its append-only file ending
in the middle of a transaction: our alert script's effects are written as MULTI, XADD,
HSET (dedupe), ..., EXEC, and the tail can stop after the HSET. ``aof-load-truncated yes``
then cuts the file after the last *complete command*, inside the MULTI (seen with Redis
7.0.15: "Truncating the AOF at offset ..." right after the dedupe HSET), and the server
appends its next writes behind that dangling MULTI. On the next start the dangling
commands are queued into the next transaction and executed after all: an alert entry
reappears whose dedupe record the publisher's resend never saw, so the stream holds the
alert twice (tests/bus/test_redis_kill.py caught it). ``redis-check-aof --fix`` cuts at
the transaction boundary instead (before the MULTI), so the embedded server runs it on a
torn file before every start: a write Redis never acknowledged durably is dropped whole,
and the publisher's confirm window sends it again.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

MANIFEST = Path("appendonlydir") / "appendonly.aof.manifest"  # Redis 7 defaults
_DIFF = re.compile(r"diff=(\d+)")


def find_check_aof(server: Path) -> Path | None:
    """``redis-check-aof`` beside ``server``, else on ``$PATH`` (Debian: redis-tools)."""
    beside = server.parent / "redis-check-aof"
    if beside.is_file():
        return beside
    found = shutil.which("redis-check-aof")
    return Path(found) if found else None


def repair(data_dir: Path, server: Path, timeout_s: float = 60.0) -> int | None:
    """Check ``data_dir``'s AOF and fix a torn one in place; the bytes dropped (0 when it
    was whole), or None when there is no AOF yet or no ``redis-check-aof`` to run (then
    the server's own truncation applies, logged)."""
    manifest = data_dir / MANIFEST
    if not manifest.is_file():
        return None
    tool = find_check_aof(server)
    if tool is None:
        log.warning("no redis-check-aof beside %s or on PATH: a torn AOF is left to redis", server)
        return None
    check = subprocess.run(
        [str(tool), str(manifest)], capture_output=True, text=True, timeout=timeout_s
    )
    if check.returncode == 0:
        return 0
    fixed = subprocess.run(
        [str(tool), "--fix", str(manifest)],
        input="y\n",
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    report = (check.stdout + check.stderr).strip().splitlines()
    if fixed.returncode != 0:
        raise RuntimeError(
            f"redis-check-aof --fix failed on {manifest}: "
            + (fixed.stdout + fixed.stderr).strip()[-500:]
        )
    found = _DIFF.search(check.stdout + check.stderr)
    dropped = int(found.group(1)) if found else 0
    log.warning(
        "AOF in %s was torn (%s): cut at its last whole transaction, %d bytes dropped",
        data_dir,
        report[-2] if len(report) >= 2 else "no detail",
        dropped,
    )
    return dropped
