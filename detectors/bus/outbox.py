"""The bounded, persistent local outbox: what waits here survives a crash of the process
and is sent in order when Redis is back (DESIGN.md §6).

One SQLite file under the state directory, in WAL mode with ``synchronous=FULL``: every
``append`` is one transaction, and SQLite fsyncs the write-ahead log before the commit
returns, so a row the publisher has appended survives a power loss. Alerts are always
journaled here before they are sent (write-ahead); score updates and call events only
while Redis is unreachable or older entries are still waiting (to keep their order).

Bounded by ``max_entries``. On overflow the oldest score updates and call events are
dropped first, then incoming ones; alerts are never dropped (the file grows past the
bound instead) and ``overflow`` is raised until the outbox drains below the bound.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL,          -- alert | score | call_event | system
    alert_id TEXT NOT NULL DEFAULT '',
    revision INTEGER NOT NULL DEFAULT 0,
    payload  TEXT NOT NULL,
    sent_at  REAL NOT NULL DEFAULT 0  -- > 0: acknowledged, kept until confirmed durable
);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str
    payload: str
    alert_id: str = ""
    revision: int = 0
    seq: int = 0  # set once stored


@dataclass(frozen=True, slots=True)
class AppendResult:
    stored: int
    dropped: int  # score updates / call events dropped to respect the bound
    overflow: bool  # alerts pushed the outbox past its bound


class Outbox:
    def __init__(self, path: Path, max_entries: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        # what a previous run sent but never saw confirmed is sent again (deduplicated)
        self._db.execute("UPDATE outbox SET sent_at = 0 WHERE sent_at > 0")
        self._count: int = self._db.execute("SELECT count(*) FROM outbox").fetchone()[0]
        self._alerts: int = self._db.execute(
            "SELECT count(*) FROM outbox WHERE kind = 'alert'"
        ).fetchone()[0]
        self._unsent: int = self._count

    def __len__(self) -> int:
        return self._count

    @property
    def alerts(self) -> int:
        return self._alerts

    @property
    def unsent(self) -> int:
        return self._unsent

    @property
    def overflow(self) -> bool:
        return self._count > self.max_entries

    def append(self, entries: list[Entry]) -> AppendResult:
        """Store ``entries`` in one fsynced transaction, dropping non-alerts if full."""
        if not entries:
            return AppendResult(0, 0, self.overflow)
        with self._lock:
            alerts = [e for e in entries if e.kind == "alert"]
            others = [e for e in entries if e.kind != "alert"]
            room = self.max_entries - self._count
            need = len(entries) - room
            dropped = 0
            deleted_old = 0
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                if need > 0:
                    # oldest stored score updates / call events go first
                    old = cur.execute(
                        "SELECT seq FROM outbox WHERE kind != 'alert' AND sent_at = 0"
                        " ORDER BY seq LIMIT ?",
                        (need,),
                    ).fetchall()
                    cur.executemany("DELETE FROM outbox WHERE seq = ?", old)
                    deleted_old = len(old)
                    dropped += deleted_old
                    need -= deleted_old
                if need > 0:
                    # then the incoming ones, newest first, never an alert
                    keep = max(0, len(others) - need)
                    dropped += len(others) - keep
                    others = others[:keep]
                kept_ids = {id(e) for e in (*alerts, *others)}
                rows = [
                    (e.kind, e.alert_id, e.revision, e.payload)
                    for e in entries
                    if id(e) in kept_ids
                ]
                cur.executemany(
                    "INSERT INTO outbox (kind, alert_id, revision, payload) VALUES (?, ?, ?, ?)",
                    rows,
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self._count += len(rows) - deleted_old
            self._unsent += len(rows) - deleted_old
            self._alerts += len(alerts)
            return AppendResult(len(rows), dropped, self.overflow)

    def head(self, limit: int) -> list[Entry]:
        """The oldest ``limit`` entries, in order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, kind, alert_id, revision, payload FROM outbox WHERE sent_at = 0"
                " ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [Entry(kind=k, payload=p, alert_id=a, revision=r, seq=s) for s, k, a, r, p in rows]

    def remove(self, entries: list[Entry]) -> None:
        """Forget entries that Redis has acknowledged."""
        if not entries:
            return
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            cur.executemany("DELETE FROM outbox WHERE seq = ?", [(e.seq,) for e in entries])
            cur.execute("COMMIT")
            self._count -= len(entries)
            self._unsent -= len(entries)
            self._alerts -= sum(1 for e in entries if e.kind == "alert")

    def mark_sent(self, entries: list[Entry], at: float) -> None:
        """Acknowledged but not known durable: kept, not sent again unless ``unsend_all``."""
        if not entries:
            return
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            cur.executemany(
                "UPDATE outbox SET sent_at = ? WHERE seq = ?", [(at, e.seq) for e in entries]
            )
            cur.execute("COMMIT")
            self._unsent -= len(entries)

    def confirm(self, sent_before: float) -> int:
        """Forget entries acknowledged before ``sent_before`` (now known durable)."""
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM outbox WHERE sent_at > 0 AND sent_at < ?", (sent_before,)
            )
            n = cur.rowcount
            self._count -= n
            self._alerts -= n
            return n

    def unsend_all(self) -> int:
        """Redis may have lost acknowledged entries (it went away): send them again."""
        with self._lock:
            n = self._db.execute("UPDATE outbox SET sent_at = 0 WHERE sent_at > 0").rowcount
            self._unsent += n
            return n

    def close(self) -> None:
        with self._lock:
            self._db.close()
