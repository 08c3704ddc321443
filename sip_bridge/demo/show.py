"""What the demo shows while it runs: each alert as it arrives in Redis (the durable
alert stream), each call's caller-identity verdict (the call events), webhook deliveries,
and the summary per call at the end."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis

from detectors.alert_schema import Alert, CallEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys


@dataclass
class Seen:
    """What arrived, per demo call name (calls are told apart by their Session-ID)."""

    alerts: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    identity: dict[str, str] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    webhooks: int = 0
    webhooks_valid: int = 0


class AlertWatcher:
    """Reads the alert and event streams from the start, prints as they arrive."""

    def __init__(self, url: str, names: dict[str, str], keys: Keys | None = None) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5)
        self.keys = keys or Keys("callshield:")
        self.names = names  # correlation (Session-ID) -> demo call name
        self.bridge_ids: dict[str, str] = {}  # bridge call id -> demo call name
        self.seen = Seen()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.client.close()

    def _name(self, call_id: str, correlation: str | None) -> str:
        if correlation in self.names:
            self.bridge_ids[call_id] = self.names[correlation]
        return self.bridge_ids.get(call_id, call_id)

    def _run(self) -> None:
        cursors = {self.keys.alerts: "0-0", self.keys.events: "0-0"}
        while not self.stop.is_set():
            try:
                got: Any = self.client.xread(cursors, block=500, count=100)  # type: ignore[arg-type]
            except (redis.ConnectionError, redis.TimeoutError):
                if self.stop.wait(0.5):
                    return
                continue
            for stream, entries in got or []:
                name = stream.decode()
                for entry_id, fields in entries:
                    cursors[name] = entry_id.decode()
                    self._show(decode(fields))

    def _show(self, message: object) -> None:
        with self.lock:
            if isinstance(message, CallEvent):
                call = self._name(message.call_id, message.correlation_id)
                if message.event == "started" and message.identity is not None:
                    ident = message.identity
                    verdict = ident.verification + (
                        f" ({ident.verification_reason})" if ident.verification_reason else ""
                    )
                    self.seen.identity[call] = verdict
                    if ident.verification != "absent":
                        print(f"  call {call:14} STIR/SHAKEN Identity: {verdict}", flush=True)
                elif message.event == "ended":
                    self.seen.ended.add(call)
            elif isinstance(message, Alert):
                call = self._name(message.call_id, message.correlation_id)
                dim = message.dimension.value
                first = dim not in self.seen.alerts[call]
                self.seen.alerts[call][dim] = message.band.value
                reason = message.reasons[0] if message.reasons else None
                why = (
                    (reason.detail or f"{reason.start_s:.1f}-{reason.end_s:.1f} s")
                    if reason
                    else ""
                )
                tag = "ALERT " if first else "update"
                print(
                    f"  {tag} call {call:14} {dim:16} {message.band.value:8} "
                    f"{message.score:.2f}: {why}",
                    flush=True,
                )

    def on_webhook(self, webhook_id: str, valid: bool) -> None:
        with self.lock:
            self.seen.webhooks += 1
            self.seen.webhooks_valid += valid
            sig = "signature valid" if valid else "SIGNATURE INVALID"
            print(f"  webhook delivered to the local receiver: {webhook_id} ({sig})", flush=True)


def summary(seen: Seen, calls: list[tuple[str, str, str]]) -> str:
    """One line per call: kind, what it plays, the alerts it raised (or none)."""
    lines = ["", "summary:"]
    for name, kind, source in calls:
        alerts = seen.alerts.get(name, {})
        raised = ", ".join(f"{d} {b}" for d, b in sorted(alerts.items())) or "no alert"
        ident = seen.identity.get(name, "")
        extra = f"; Identity {ident}" if ident and not ident.startswith("absent") else ""
        lines.append(f"  {name:14} {kind:18} {source[:38]:38} {raised}{extra}")
    lines.append(
        f"  webhooks delivered: {seen.webhooks} ({seen.webhooks_valid} with a valid signature)"
    )
    return "\n".join(lines)
