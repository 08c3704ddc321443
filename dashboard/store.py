"""Reads the bus and keeps the analysts' triage state (no FastAPI here).

Alerts come from the durable stream (newest ``alerts_scan`` entries, latest revision per
alert id; a single alert by id from the publisher's dedupe hash). Live calls from
``calls:live`` and the ``call:<id>`` hashes. A call's score timeline from the newest
``scores_scan`` entries of the lossy scores stream (there is no per-call index yet).
Triage (acknowledge, assign, comment, label) lives under ``dash:*`` (``dashboard.keys``).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis.asyncio

from dashboard.keys import DashKeys
from dashboard.masking import mask_ids, mask_number, mask_text
from dashboard.nodes import read_nodes
from dashboard.schemas import (
    BAND_RANK,
    AlertPublic,
    CallDetail,
    CallPublic,
    CallRisk,
    Comment,
    DimensionRisk,
    Health,
    StreamHealth,
    TimelinePoint,
    Triage,
)
from dashboard.tenancy import Tenants
from detectors.alert_schema import Alert, Band, CallEvent, Dimension, ScoreUpdate, SystemEvent
from detectors.bus.biometrics import CallUpdate
from detectors.bus.codec import decode_alert
from detectors.bus.keys import Keys
from detectors.bus.numbers import NumberVault

log = logging.getLogger(__name__)
Clock = Callable[[], float]


def _s(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


class DashboardStore:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        keys: Keys,
        clock: Clock,
        alerts_scan: int,
        scores_scan: int,
        numbers: NumberVault | None = None,
    ) -> None:
        self._r, self.keys, self.dash = client, keys, DashKeys(keys)
        self._numbers = numbers  # opens the bridge-sealed ANI/DNIS (masked, or revealed)
        self._clock, self._alerts_scan, self._scores_scan = clock, alerts_scan, scores_scan
        self._claims_scan = alerts_scan  # newest mid-call claims read for queue/agent
        # stream entries never change: each is decoded (and masked) once, not per request
        # (the queue view is polled; re-decoding 2,000 alerts held the live feed's loop)
        self._decoded: dict[bytes, Alert | None] = {}
        self._public: dict[tuple[str, int], AlertPublic] = {}

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The shared client (for readers kept in their own modules)."""
        return self._r

    # --- alerts ---------------------------------------------------------------------
    async def _latest_alerts(self) -> list[Alert]:
        entries: Any = await self._r.xrevrange(self.keys.alerts, count=self._alerts_scan)
        latest: dict[str, Alert] = {}
        decoded: dict[bytes, Alert | None] = {}  # only the entries still in the scan
        for entry_id, fields in entries:
            if entry_id in self._decoded:
                alert = decoded[entry_id] = self._decoded[entry_id]
            else:
                try:
                    alert = decoded[entry_id] = decode_alert(fields)
                except ValueError:
                    alert = decoded[entry_id] = None
            if alert is None:
                continue  # counted by the producer's schema tests; a reader drops it
            seen = latest.get(alert.alert_id)
            if seen is None or alert.revision > seen.revision:
                latest[alert.alert_id] = alert
        self._decoded = decoded
        return sorted(latest.values(), key=lambda a: a.updated_at, reverse=True)

    async def alert(self, alert_id: str) -> Alert | None:
        body = await self._r.hget(self.keys.alert_seen(alert_id), "latest")
        if body is not None:
            return Alert.model_validate_json(body)
        return next((a for a in await self._latest_alerts() if a.alert_id == alert_id), None)

    async def triage(self, alert_ids: list[str]) -> dict[str, Triage]:
        pipe = self._r.pipeline(transaction=False)
        for alert_id in alert_ids:
            pipe.hgetall(self.dash.triage(alert_id))
        out: dict[str, Triage] = {}
        for alert_id, raw in zip(alert_ids, await pipe.execute(), strict=True):
            fields = {_s(k): _s(v) for k, v in raw.items()}
            if "ack_at" in fields:
                fields["ack_at"] = float(fields["ack_at"])  # type: ignore[assignment]
            out[alert_id] = Triage.model_validate(fields)
        return out

    async def alerts(
        self,
        status: str | None = None,
        band: Band | None = None,
        call_id: str | None = None,
        tenants: Tenants = None,
    ) -> list[AlertPublic]:
        """``tenants``: only those tenants' alerts (None: every tenant's)."""
        alerts = await self._latest_alerts()
        if tenants is not None:
            alerts = [a for a in alerts if a.tenant in tenants]
        if band is not None:
            alerts = [a for a in alerts if a.band == band]
        if call_id is not None:
            alerts = [a for a in alerts if a.call_id == call_id]
        triage = await self.triage([a.alert_id for a in alerts])
        public = [self._public_of(a, triage[a.alert_id]) for a in alerts]
        if len(self._public) > 2 * self._alerts_scan:  # keep only what this scan showed
            self._public = {(p.alert_id, p.revision): p for p in public}
        if status is not None:
            public = [p for p in public if p.triage.status == status]
        return public

    def _public_of(self, alert: Alert, triage: Triage) -> AlertPublic:
        base = self._public.get((alert.alert_id, alert.revision))
        if base is None:
            base = self._public[alert.alert_id, alert.revision] = AlertPublic.of(alert)
        return base.model_copy(update={"triage": triage})

    async def public_alert(self, alert_id: str) -> AlertPublic | None:
        alert = await self.alert(alert_id)
        if alert is None:
            return None
        return AlertPublic.of(alert, (await self.triage([alert_id]))[alert_id])

    # --- triage ---------------------------------------------------------------------
    async def acknowledge(self, alert_id: str, by: str) -> None:
        key = self.dash.triage(alert_id)
        if await self._r.hsetnx(key, "ack_by", by):
            await self._r.hset(key, mapping={"status": "acknowledged", "ack_at": self._clock()})

    async def assign(self, alert_id: str, assignee: str) -> None:
        await self._r.hset(self.dash.triage(alert_id), "assignee", assignee)

    async def comment(self, alert_id: str, by: str, text: str) -> Comment:
        comment = Comment(by=by, at=self._clock(), text=text)
        await self._r.rpush(self.dash.comments(alert_id), comment.model_dump_json())
        return comment

    async def comments(self, alert_id: str) -> list[Comment]:
        raw = await self._r.lrange(self.dash.comments(alert_id), 0, -1)
        return [Comment.model_validate_json(c) for c in raw]

    async def label(self, alert: Alert, label: str, note: str, by: str) -> dict[str, Any]:
        """Stores the label with what calibration needs: the score, the threshold and
        the policy and model versions that produced them."""
        record = {
            "alert_id": alert.alert_id,
            "revision": alert.revision,
            "call_id": alert.call_id,
            "tenant": alert.tenant,
            "dimension": alert.dimension.value,
            "band": alert.band.value,
            "score": alert.score,
            "threshold": alert.threshold,
            "thresholds": dict(alert.thresholds),
            "policy_version": alert.policy_version,
            "model_versions": dict(alert.model_versions),
            "provider": alert.provider,
            "label": label,
            "note": mask_text(note),
            "by": by,
            "at": self._clock(),
        }
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(self.dash.labels, alert.alert_id, json.dumps(record))
        pipe.hset(self.dash.triage(alert.alert_id), mapping={"label": label, "labelled_by": by})
        await pipe.execute()
        return record

    async def labels(self, tenants: Tenants = None) -> list[dict[str, Any]]:
        raw = await self._r.hvals(self.dash.labels)
        found = (json.loads(v) for v in raw)
        shown = (r for r in found if tenants is None or r.get("tenant", "default") in tenants)
        return sorted(shown, key=lambda r: float(r["at"]))

    # --- calls ----------------------------------------------------------------------
    async def _call_hashes(self, call_ids: list[str]) -> list[dict[str, str]]:
        pipe = self._r.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hgetall(self.keys.call(call_id))
        return [{_s(k): _s(v) for k, v in h.items()} for h in await pipe.execute()]

    def _open_numbers(self, call_id: str, fields: dict[str, str]) -> dict[str, str]:
        """The call's numbers in clear (for masking or the audited reveal); empty when
        none were sealed or they do not open with this deployment's key."""
        sealed = fields.get("numbers", "")
        if not sealed or self._numbers is None:
            return {"ani": "", "dnis": ""}
        try:
            return self._numbers.open(call_id, sealed)
        except ValueError:
            log.warning("call %s: its sealed numbers do not open with this key", call_id)
            return {"ani": "", "dnis": ""}

    @staticmethod
    def _event(fields: dict[str, str]) -> CallEvent | None:
        if not fields.get("json"):
            return None
        try:
            return CallEvent.model_validate_json(fields["json"])
        except ValueError:
            return None

    def _call(
        self,
        call_id: str,
        fields: dict[str, str],
        alerts: list[Alert],
        claims: dict[str, str] | None = None,
    ) -> CallPublic:
        event = self._event(fields)
        top = max(alerts, key=lambda a: (BAND_RANK[a.band], a.score), default=None)
        numbers = self._open_numbers(call_id, fields)
        claims = claims or {}
        tenant = event.tenant if event else alerts[0].tenant if alerts else "default"
        return CallPublic(
            call_id=call_id,
            state=fields.get("state", "unknown"),
            at=event.at if event else None,
            correlation_id=event.correlation_id if event else None,
            external_ids=mask_ids(event.external_ids) if event else {},
            ani=mask_number(numbers["ani"]),
            dnis=mask_number(numbers["dnis"]),
            band=top.band if top else Band.LOW,
            dimension=top.dimension if top else None,
            score=top.score if top else None,
            alerts=len(alerts),
            queue=claims.get("queue"),
            agent_id=claims.get("agent_id"),
            tenant=tenant,
        )

    async def call_claims(self, call_ids: set[str] | None = None) -> dict[str, dict[str, str]]:
        """Queue and agent per call from the newest ``claims_scan`` mid-call claims
        (``PATCH /calls/{id}``; the bridge keeps them in memory only): the newest value
        of each field wins."""
        entries: Any = await self._r.xrevrange(self.keys.call_updates, count=self._claims_scan)
        out: dict[str, dict[str, str]] = {}
        for _, raw in entries:
            body = next((v for k, v in raw.items() if _s(k) == "json"), None)
            if body is None:
                continue
            try:
                update = CallUpdate.model_validate_json(body)
            except ValueError:
                continue  # the route validated it; a foreign writer's entry is dropped
            if call_ids is not None and update.call_id not in call_ids:
                continue
            seen = out.setdefault(update.call_id, {})
            for name in ("queue", "agent_id"):
                value = getattr(update, name)
                if value is not None:
                    seen.setdefault(name, value)
        return out

    async def live_calls(
        self,
        band: Band | None = None,
        queue: str | None = None,
        agent: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 500,
        tenants: Tenants = None,
    ) -> list[CallPublic]:
        """Live calls, riskiest first. ``since``/``until`` bound the call's last event
        (the ``calls:live`` score); ``queue``/``agent`` match the claimed ones exactly."""
        members: Any = await self._r.zrevrangebyscore(
            self.keys.live_calls,
            until.timestamp() if until else "+inf",
            since.timestamp() if since else "-inf",
            start=0,
            num=limit,
        )
        ids = [_s(c) for c in members]
        by_call: dict[str, list[Alert]] = defaultdict(list)
        for alert in await self._latest_alerts():
            by_call[alert.call_id].append(alert)
        claims = await self.call_claims(set(ids))
        calls = [
            self._call(call_id, fields, by_call.get(call_id, []), claims.get(call_id))
            for call_id, fields in zip(ids, await self._call_hashes(ids), strict=True)
        ]
        if tenants is not None:
            calls = [c for c in calls if c.tenant in tenants]
        if band is not None:
            calls = [c for c in calls if c.band == band]
        if queue is not None:
            calls = [c for c in calls if c.queue == queue]
        if agent is not None:
            calls = [c for c in calls if c.agent_id == agent]
        return sorted(calls, key=lambda c: (BAND_RANK[c.band], c.score or 0.0), reverse=True)

    async def raw_numbers(self, call_id: str) -> dict[str, Any] | None:
        """The unmasked numbers of one call (only the audited reveal route calls this)."""
        (fields,) = await self._call_hashes([call_id])
        if not fields:
            return None
        ids: dict[str, str] = {}
        if fields.get("json"):
            ids = dict(CallEvent.model_validate_json(fields["json"]).external_ids)
        return {**self._open_numbers(call_id, fields), "external_ids": ids}

    async def call_tenant(self, call_id: str) -> str | None:
        """The call's tenant: from its last event, else its alerts; None when unknown."""
        (fields,) = await self._call_hashes([call_id])
        event = self._event(fields)
        if event is not None:
            return event.tenant
        alert = next((a for a in await self._latest_alerts() if a.call_id == call_id), None)
        return alert.tenant if alert else None

    async def call_by_external_id(self, system: str, external_id: str) -> str | None:
        value = await self._r.get(self.keys.external_id(system, external_id))
        return _s(value) or None

    async def call_risk(self, call_id: str) -> CallRisk | None:
        """One HGETALL of the call's hash: its last event and the latest alert of each
        dimension (kept there by the bus publisher), never a stream scan."""
        raw: Any = await self._r.hgetall(self.keys.call(call_id))
        if not raw:
            return None
        fields = {_s(k): _s(v) for k, v in raw.items()}
        event = None
        if fields.get("json"):
            try:
                event = CallEvent.model_validate_json(fields["json"])
            except ValueError:
                event = None
        dims: dict[Dimension, DimensionRisk] = {}
        for name, body in fields.items():
            if not name.startswith("risk:") or name.endswith(":rank"):
                continue
            try:
                alert = Alert.model_validate_json(body)
            except ValueError:
                continue
            dims[alert.dimension] = DimensionRisk(
                band=alert.band,
                score=alert.score,
                threshold=alert.threshold,
                alert_id=alert.alert_id,
                revision=alert.revision,
                updated_at=alert.updated_at,
                reasons=[mask_text(r.detail) or r.dimension.value for r in alert.reasons],
            )
        top = max(dims.values(), key=lambda d: BAND_RANK[d.band], default=None)
        unanalyzed = ""
        if event is not None and event.reason.startswith("unanalyzed:"):
            unanalyzed = event.reason.partition(":")[2]
        return CallRisk(
            call_id=call_id,
            state=fields.get("state", "unknown"),
            band=top.band if top else Band.LOW,
            dimensions=dims,
            unanalyzed=unanalyzed,
            correlation_id=event.correlation_id if event else None,
            as_of=datetime.fromtimestamp(self._clock(), UTC),
            tenant=event.tenant if event else "default",
        )

    async def call_detail(self, call_id: str) -> CallDetail | None:
        (fields,) = await self._call_hashes([call_id])
        alerts = [a for a in await self._latest_alerts() if a.call_id == call_id]
        if not fields and not alerts:
            return None
        triage = await self.triage([a.alert_id for a in alerts])
        timeline: dict[str, list[TimelinePoint]] = defaultdict(list)
        abstentions: dict[str, int] = defaultdict(int)
        concealed: list[float] = []
        jitter: list[float] = []
        needle = json.dumps(call_id).encode()  # a cheap test before parsing
        scores: Any = await self._r.xrevrange(self.keys.scores, count=self._scores_scan)
        for _, entry in reversed(scores):
            body = entry.get(b"json", b"")
            if needle not in body:
                continue
            try:
                score = ScoreUpdate.model_validate_json(body)
            except ValueError:
                continue
            if score.call_id != call_id:
                continue
            if score.score is None:
                abstentions[score.dimension.value] += 1
            else:
                timeline[score.dimension.value].append(
                    TimelinePoint(t=score.window_end_s, score=score.score)
                )
            concealed.append(score.quality.concealed_ratio)
            jitter.append(score.quality.jitter_ms)
        event = self._event(fields)
        claims = (await self.call_claims({call_id})).get(call_id)
        return CallDetail(
            call=self._call(call_id, fields, alerts, claims),
            identity=event.identity if event else None,
            alerts=[AlertPublic.of(a, triage[a.alert_id]) for a in alerts],
            timeline=dict(timeline),
            abstentions=dict(abstentions),
            concealed_ratio=sum(concealed) / len(concealed) if concealed else None,
            jitter_ms=sum(jitter) / len(jitter) if jitter else None,
        )

    # --- health ---------------------------------------------------------------------
    async def _stream(self, key: str, groups: bool) -> StreamHealth:
        try:
            info = await self._r.xinfo_stream(key)
        except redis.ResponseError:  # no such key yet
            return StreamHealth(length=0, last_id=None, last_age_s=None)
        last_id = _s(info.get("last-generated-id")) or None
        age = None
        if info.get("length") and last_id:
            age = max(0.0, self._clock() - int(last_id.split("-")[0]) / 1000)
        found: list[dict[str, int | str | None]] = []
        if groups:
            for g in await self._r.xinfo_groups(key):
                found.append(
                    {
                        "name": _s(g.get("name")),
                        "pending": int(g.get("pending", 0)),
                        "lag": g.get("lag"),
                    }
                )
        return StreamHealth(
            length=int(info["length"]), last_id=last_id, last_age_s=age, groups=found
        )

    async def health(self) -> Health:
        try:
            info = await self._r.info("server")
            streams = {
                "alerts": await self._stream(self.keys.alerts, groups=True),
                "scores": await self._stream(self.keys.scores, groups=False),
                "events": await self._stream(self.keys.events, groups=False),
            }
            live = int(await self._r.zcard(self.keys.live_calls))
            nodes = await read_nodes(self._r, self.keys, datetime.fromtimestamp(self._clock(), UTC))
        except (redis.RedisError, OSError) as exc:
            return Health(redis_ok=False, error=type(exc).__name__)
        return Health(
            redis_ok=True,
            redis_version=str(info.get("redis_version")),
            streams=streams,
            live_calls=live,
            nodes=nodes,
        )

    # --- system state -------------------------------------------------------------------
    async def coverage_degraded(self) -> list[SystemEvent]:
        """Each node's dimensions whose latest coverage event says degraded (the banner);
        an unreachable Redis or an unreadable entry shows no banner rather than an error."""
        try:
            raw: Any = await self._r.hgetall(self.keys.system_state)
        except (redis.RedisError, OSError):
            return []
        out = []
        for name, body in raw.items():
            if not _s(name).startswith("system.coverage:"):
                continue
            try:
                event = SystemEvent.model_validate_json(body)
            except ValueError:
                continue
            if event.type == "system.coverage.degraded" and event.coverage is not None:
                out.append(event)
        return sorted(out, key=lambda e: (e.node_id, e.coverage.dimension if e.coverage else ""))
