"""Fraud cases (issue 11): calls linked by voiceprint match, replayed audio or caller
number, with a disposition and a loss amount.

A case is one JSON document in ``dash:cases`` (``dashboard.keys``), changed by a
compare-and-set script on its ``version`` (two analysts editing at once: the second
gets 409). Each linked call keeps what the case needs after the bus forgot the call
(call state expires after a day, streams are capped): its start time in UTC, the keyed
ANI hash (``ani_hash`` from the call's hash: never a number), and its alerts with their
reasons' offsets from the call's start. ``CallFacts`` reads those from the bus.

Links: ``ani`` (the call's ANI hash equals one already in the case), ``voiceprint``
(a known_fraudster alert names a watchlist entry another call of the case matched),
``replay`` (a replay alert; the replay detector's reasons name no call, so this link is
the analyst's judgement, shown with the alert), ``manual``. ``ani`` and ``voiceprint``
are checked; ``suggest`` finds candidates for them among recent calls.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

import redis.asyncio
from pydantic import BaseModel, ConfigDict, Field

from dashboard.keys import DashKeys
from dashboard.related import replayed_with
from detectors.alert_schema import Alert, CallEvent, Dimension
from detectors.bus.codec import decode_alert

_CAS = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '0' then
  if cur then return 0 end
elseif not cur or cjson.decode(cur)['version'] ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
_ENTRY = re.compile(r"watchlist entry (wl_[0-9a-f]{16})")


class Disposition(StrEnum):
    OPEN = "open"
    CONFIRMED_FRAUD = "confirmed_fraud"
    NOT_FRAUD = "not_fraud"
    INCONCLUSIVE = "inconclusive"
    CLOSED = "closed"


class LinkKind(StrEnum):
    ANI = "ani"
    VOICEPRINT = "voiceprint"
    REPLAY = "replay"
    MANUAL = "manual"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CaseReason(_Model):
    dimension: Dimension
    start_s: float  # offset from the call's start (the leg clock alerts use)
    end_s: float
    score: float


class CaseAlert(_Model):
    alert_id: str
    dimension: Dimension
    band: str
    score: float
    created_at: datetime  # UTC
    reasons: tuple[CaseReason, ...]
    watchlist_entry: str | None = None  # known_fraudster: the entry it matched


class CaseCall(_Model):
    call_id: str
    link: LinkKind
    note: str = ""
    ani_hash: str = ""
    started_at: datetime | None = None  # UTC of the call's ``started`` event
    added_by: str
    added_at: datetime
    alerts: tuple[CaseAlert, ...] = ()


Money = Annotated[Decimal, Field(ge=0, max_digits=14, decimal_places=2)]


class Case(_Model):
    case_id: str = Field(pattern=r"^case_[0-9a-f]{16}$")
    version: int = Field(ge=1)
    title: str = Field(min_length=1, max_length=200)
    tenant: str = "default"
    disposition: Disposition = Disposition.OPEN
    loss_amount: Money | None = None
    currency: str = Field(default="", pattern=r"^([A-Z]{3})?$")
    created_by: str
    created_at: datetime
    updated_by: str
    updated_at: datetime
    calls: tuple[CaseCall, ...] = ()

    def call(self, call_id: str) -> CaseCall | None:
        return next((c for c in self.calls if c.call_id == call_id), None)


class CaseConflictError(Exception):
    """Someone else changed the case first (or it already exists)."""


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def new_case_id() -> str:
    return f"case_{secrets.token_hex(8)}"


class CaseStore:
    def __init__(self, client: redis.asyncio.Redis, dash: DashKeys) -> None:
        self._r, self._dash = client, dash
        self._cas = client.register_script(_CAS)

    async def get(self, case_id: str) -> Case | None:
        body: Any = await self._r.hget(self._dash.cases, case_id)
        return Case.model_validate_json(body) if body is not None else None

    async def list(self) -> list[Case]:
        raw: Any = await self._r.hvals(self._dash.cases)
        cases = [Case.model_validate_json(b) for b in raw]
        return sorted(cases, key=lambda c: c.updated_at, reverse=True)

    async def put(self, case: Case, base_version: int) -> None:
        """Store ``case`` if the stored one is still at ``base_version`` (0: new)."""
        done = await self._cas(
            keys=[self._dash.cases], args=[case.case_id, base_version, case.model_dump_json()]
        )
        if not int(done):
            raise CaseConflictError("the case changed meanwhile: reload it and retry")


class CallFacts:
    """What the bus still knows of a call: its start, ANI hash and alerts."""

    def __init__(self, client: redis.asyncio.Redis, dash: DashKeys, scan: int) -> None:
        self._r, self._k, self._scan = client, dash.bus, scan

    async def _events(self) -> list[CallEvent]:
        entries: Any = await self._r.xrevrange(self._k.events, count=self._scan)
        out = []
        for _, fields in entries:
            try:
                out.append(CallEvent.model_validate_json(fields.get(b"json", b"")))
            except ValueError:
                continue
        return out

    async def _alerts(self) -> list[Alert]:
        entries: Any = await self._r.xrevrange(self._k.alerts, count=self._scan)
        latest: dict[str, Alert] = {}
        for _, fields in entries:
            try:
                a = decode_alert(fields)
            except ValueError:
                continue
            if a.alert_id not in latest or a.revision > latest[a.alert_id].revision:
                latest[a.alert_id] = a
        return list(latest.values())

    async def calls(self) -> dict[str, tuple[datetime | None, str]]:
        """call id -> (started at, ANI hash) for the calls the events stream holds."""
        out: dict[str, tuple[datetime | None, str]] = {}
        for e in reversed(await self._events()):  # oldest first
            at, ani = out.get(e.call_id, (None, ""))
            if e.event == "started":
                at = e.at
            if e.numbers is not None and e.numbers.ani_hash:
                ani = e.numbers.ani_hash
            out[e.call_id] = (at, ani)
        return out

    async def call(self, call_id: str, link: LinkKind, note: str, by: str) -> CaseCall | None:
        started, ani = (await self.calls()).get(call_id, (None, ""))
        if not ani:
            raw: Any = await self._r.hget(self._k.call(call_id), "ani_hash")
            ani = _s(raw) if raw else ""
        alerts = tuple(
            _case_alert(a)
            for a in sorted(await self._alerts(), key=lambda a: a.created_at)
            if a.call_id == call_id
        )
        if started is None and not alerts and not ani:
            return None
        return CaseCall(
            call_id=call_id,
            link=link,
            note=note,
            ani_hash=ani,
            started_at=started,
            added_by=by,
            added_at=datetime.now(UTC),
            alerts=alerts,
        )

    async def suggest(self, case: Case) -> list[dict[str, Any]]:
        """Recent calls not in the case sharing an ANI hash or a matched watchlist entry
        with it, and calls with replay alerts (for the analyst to judge)."""
        have = {c.call_id for c in case.calls}
        anis = {c.ani_hash for c in case.calls if c.ani_hash}
        entries = {a.watchlist_entry for c in case.calls for a in c.alerts if a.watchlist_entry}
        return await self._linked(have, anis, entries, replay=True)

    async def related(self, call_id: str) -> list[dict[str, Any]]:
        """Other recent calls with the call's ANI hash or a watchlist entry it matched,
        and those the replay stage matched its audio with (the call page): the checked
        links only, no replay guesses."""
        this = await self.call(call_id, LinkKind.MANUAL, "", "")
        if this is None:
            return []
        entries = {a.watchlist_entry for a in this.alerts if a.watchlist_entry}
        anis = {this.ani_hash} if this.ani_hash else set()
        linked = await self._linked({call_id}, anis, entries, replay=False)
        shown = {r["call_id"] for r in linked}
        replayed = await replayed_with(self._r, self._k, call_id, await self._events())
        return linked + [r for r in replayed if r["call_id"] not in shown]

    async def _linked(
        self, have: set[str], anis: set[str], entries: set[str], replay: bool
    ) -> list[dict[str, Any]]:
        out: dict[tuple[str, LinkKind], dict[str, Any]] = {}
        for call_id, (started, ani) in (await self.calls()).items():
            if call_id not in have and ani and ani in anis:
                out[call_id, LinkKind.ANI] = {
                    "call_id": call_id,
                    "link": LinkKind.ANI,
                    "started_at": started,
                    "why": "same ANI hash",
                }
        for a in await self._alerts():
            if a.call_id in have:
                continue
            entry = _case_alert(a).watchlist_entry
            if entry and entry in entries:
                out[a.call_id, LinkKind.VOICEPRINT] = {
                    "call_id": a.call_id,
                    "link": LinkKind.VOICEPRINT,
                    "started_at": None,
                    "why": f"matched watchlist entry {entry}",
                }
            elif replay and a.dimension is Dimension.REPLAY:
                out[a.call_id, LinkKind.REPLAY] = {
                    "call_id": a.call_id,
                    "link": LinkKind.REPLAY,
                    "started_at": None,
                    "why": f"replay alert at {a.created_at.isoformat()}",
                }
        return list(out.values())


def _case_alert(a: Alert) -> CaseAlert:
    entry = None
    if a.dimension is Dimension.KNOWN_FRAUDSTER:
        found = next((m for r in a.reasons if (m := _ENTRY.search(r.detail))), None)
        entry = found.group(1) if found else None
    return CaseAlert(
        alert_id=a.alert_id,
        dimension=a.dimension,
        band=a.band.value,
        score=a.score,
        created_at=a.created_at,
        reasons=tuple(CaseReason(**r.model_dump(exclude={"detail"})) for r in a.reasons),
        watchlist_entry=entry,
    )


def check_link(case: Case, call: CaseCall) -> str:
    """ "" when the link holds, else why not (``ani`` and ``voiceprint`` are checked)."""
    if call.link is LinkKind.ANI:
        anis = {c.ani_hash for c in case.calls if c.ani_hash}
        if not call.ani_hash:
            return "the call has no caller number (no ANI hash) to link by"
        if anis and call.ani_hash not in anis:
            return "the call's ANI hash matches no call of the case"
    if call.link is LinkKind.VOICEPRINT:
        mine = {a.watchlist_entry for a in call.alerts if a.watchlist_entry}
        theirs = {a.watchlist_entry for c in case.calls for a in c.alerts if a.watchlist_entry}
        if not mine:
            return "the call matched no watchlist voiceprint"
        if theirs and not mine & theirs:
            return "the call matched another voiceprint than the case's calls"
    return ""


def utc_at(started: datetime | None, offset_s: float) -> str:
    return (started + timedelta(seconds=offset_s)).isoformat() if started else ""


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)
