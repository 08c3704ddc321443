"""Erasing a data subject's biometric data and what links to it (issue 11; GDPR art. 17,
BIPA): ``DELETE /api/v1/subjects/{ref}`` on the dashboard runs ``SubjectEraser.erase``.

``ref`` is a customer's subject (account) reference or a case reference. Erased, in
every tenant:

- enrolments ``enrol:<tenant>:<ref>``;
- watchlist entries whose case reference or label is ``ref`` (the version moves, so
  bridges drop them from their caches within a refresh);
- mid-call claims naming ``ref`` as the claimed account (``calls:updates`` entries:
  they also carry the consent reference);
- for the calls those claims and entries link to (a watchlist entry made from a call
  names it as its source): their fingerprints in the shared ``fp:log`` (owned by the
  call or its correlation id) and their kept evidence (``evidence:{<call>}``: clips and
  the aggregated embedding), unless that call's evidence is on legal hold, which an
  erasure does not override (art. 17(3)(e)): those calls are reported, not erased.

Audit entries name subjects as they were written; the erasure's own record carries no
biometric data (the caller records counts and a hash of ``ref``). Needs SCAN and XDEL,
and XRANGE/XDEL on ``fp:log``, under the dashboard's ACL user (``acl``); evidence goes
by EXPIREAT in the past, which that user already has for legal holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio

from detectors.alert_schema import CallEvent
from detectors.bus.acl import glob_escape
from detectors.bus.biometrics import TENANT_PATTERN, CallUpdate
from detectors.bus.biometrics_store import BiometricsStore, parse_entries
from detectors.bus.keys import Keys

PAGE = 1000
_TENANT = re.compile(TENANT_PATTERN)


@dataclass
class Erasure:
    enrolments: list[str] = field(default_factory=list)  # tenants
    watchlist_entries: list[str] = field(default_factory=list)  # "<tenant>/<entry id>"
    call_updates: int = 0
    fingerprints: int = 0
    evidence_records: int = 0
    calls: list[str] = field(default_factory=list)  # linked calls
    held_calls: list[str] = field(default_factory=list)  # linked, on legal hold: kept

    def counts(self) -> dict[str, Any]:
        return {
            "enrolments": len(self.enrolments),
            "watchlist_entries": len(self.watchlist_entries),
            "call_updates": self.call_updates,
            "fingerprints": self.fingerprints,
            "evidence_records": self.evidence_records,
            "linked_calls": len(self.calls),
            "held_calls": len(self.held_calls),
        }


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


class SubjectEraser:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys) -> None:
        self._r, self._k = client, keys

    async def erase(
        self, ref: str, is_held: Callable[[str], Awaitable[bool]] | None = None
    ) -> Erasure:
        out = Erasure()
        await self._enrolments(ref, out)
        linked = await self._watchlists(ref, out)
        linked |= await self._updates(ref, out)
        out.calls = sorted(linked)
        erasable = []
        for call_id in out.calls:
            if is_held is not None and await is_held(call_id):
                out.held_calls.append(call_id)
            else:
                erasable.append(call_id)
        await self._fingerprints(await self._owners(erasable), out)
        for call_id in erasable:
            out.evidence_records += await self._evidence(call_id)
        return out

    async def _scan(self, pattern: str, kind: str | None = None) -> AsyncIterator[str]:
        async for key in self._r.scan_iter(match=pattern, count=PAGE, _type=kind):
            yield _s(key)

    async def _enrolments(self, ref: str, out: Erasure) -> None:
        head = f"{self._k.prefix}enrol:"
        pattern = f"{glob_escape(head)}*:{glob_escape(ref)}"
        async for key in self._scan(pattern):
            tenant = key[len(head) : len(key) - len(ref) - 1]
            if _TENANT.fullmatch(tenant) and await self._r.delete(key):
                out.enrolments.append(tenant)

    async def _watchlists(self, ref: str, out: Erasure) -> set[str]:
        """Removes the entries naming ``ref``; the calls they were made from."""
        head = f"{self._k.prefix}watchlist:"
        store = BiometricsStore(self._r, self._k)
        calls: set[str] = set()
        async for key in self._scan(f"{glob_escape(head)}*", "hash"):
            tenant = key[len(head) :]
            if not _TENANT.fullmatch(tenant):
                continue
            entries, _ = parse_entries(await self._r.hgetall(key))
            hits = [e for e in entries if ref in (e.case_ref, e.label)]
            if not hits:
                continue
            await store.remove_entries(tenant, [e.entry_id for e in hits])
            out.watchlist_entries += [f"{tenant}/{e.entry_id}" for e in hits]
            calls |= {e.source[5:] for e in hits if e.source.startswith("call:")}
        return calls

    async def _pages(self, stream: str) -> AsyncIterator[list[tuple[str, dict[bytes, bytes]]]]:
        start = "-"
        while True:
            got: Any = await self._r.xrange(stream, min=start, max="+", count=PAGE)
            if not got:
                return
            yield [(_s(i), f) for i, f in got]
            start = "(" + _s(got[-1][0])

    async def _updates(self, ref: str, out: Erasure) -> set[str]:
        """Deletes the claims naming ``ref``; the calls they were made on."""
        calls: set[str] = set()
        doomed: list[str] = []
        async for page in self._pages(self._k.call_updates):
            for entry_id, fields in page:
                try:
                    update = CallUpdate.model_validate_json(fields.get(b"json", b""))
                except ValueError:
                    continue
                if update.claimed_account == ref:
                    doomed.append(entry_id)
                    calls.add(update.call_id)
        out.call_updates = await self._xdel(self._k.call_updates, doomed)
        return calls

    async def _owners(self, call_ids: list[str]) -> set[str]:
        """The keys fingerprints are filed under: the call ids and correlation ids."""
        owners = set(call_ids)
        for call_id in call_ids:
            body: Any = await self._r.hget(self._k.call(call_id), "json")
            if body is None:
                continue
            try:
                event = CallEvent.model_validate_json(body)
            except ValueError:
                continue
            if event.correlation_id:
                owners.add(event.correlation_id)
        return owners

    async def _fingerprints(self, owners: set[str], out: Erasure) -> None:
        if not owners:
            return
        doomed: list[str] = []
        async for page in self._pages(self._k.fingerprint_log):
            for entry_id, fields in page:
                try:
                    owner = json.loads(fields.get(b"r", b"{}")).get("owner")
                except (ValueError, AttributeError):
                    continue
                if owner in owners:
                    doomed.append(entry_id)
        out.fingerprints = await self._xdel(self._k.fingerprint_log, doomed)

    async def _evidence(self, call_id: str) -> int:
        index = self._k.evidence_index(call_id)
        ids: Any = await self._r.hgetall(index)
        erased = 0
        # an expiry in the past deletes the key at once: the one write the dashboard's
        # ACL user has on evidence besides PERSIST (legal hold), no DEL grant needed
        for evidence_id in ids:
            key = self._k.evidence(call_id, _s(evidence_id))
            erased += int(await self._r.expireat(key, 1))
        await self._r.expireat(index, 1)
        return erased

    async def _xdel(self, stream: str, ids: list[str]) -> int:
        done = 0
        for i in range(0, len(ids), PAGE):
            done += int(await self._r.xdel(stream, *ids[i : i + PAGE]))
        return done
