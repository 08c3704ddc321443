"""The audit log of analyst and admin actions: a Redis stream (``dash:audit``).

Each entry names who, with which role, did what to which object, of which tenant
(``tenant``: the object's tenant when the action names one, else the actor's tenant
set, ``*`` for platform-wide), and when. Free text
that might hold personal data (comments, notes, reveal reasons) is recorded masked or as
a length, never verbatim; revealed numbers are never in it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis.asyncio

from dashboard.auth import Principal
from dashboard.keys import DashKeys
from dashboard.tenancy import Tenants, label


class AuditLog:
    def __init__(
        self, client: redis.asyncio.Redis, keys: DashKeys, clock: Callable[[], float], maxlen: int
    ) -> None:
        self._r, self._k, self._clock, self._maxlen = client, keys, clock, maxlen

    async def record(self, who: Principal, action: str, target: str, /, **detail: Any) -> None:
        """``tenant=`` in ``detail`` names the object's tenant (kept in the detail too)."""
        tenant = str(detail["tenant"]) if "tenant" in detail else label(who.tenants)
        await self.record_as(
            who.name, who.role.label, who.kind, action, target, audit_tenant=tenant, **detail
        )

    async def record_as(
        self,
        actor: str,
        role: str,
        via: str,
        action: str,
        target: str,
        /,
        audit_tenant: str = "",
        **detail: Any,
    ) -> None:
        """An entry for someone who is not (yet) a principal: a login, a refused one."""
        fields = {
            "tenant": audit_tenant,
            "at": repr(self._clock()),
            "actor": actor,
            "role": role,
            "via": via,
            "action": action,
            "target": target,
            "detail": json.dumps(detail, sort_keys=True),
        }
        await self._r.xadd(self._k.audit, fields, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]

    async def recent(self, count: int = 200, tenants: Tenants = None) -> list[dict[str, Any]]:
        """The newest ``count`` entries; with ``tenants``, only entries of those tenants
        (a platform-wide actor's untargeted entries are left out)."""
        out = []
        entries: Any = await self._r.xrevrange(self._k.audit, count=count)
        for entry_id, fields in entries:
            row: dict[str, Any] = {k.decode(): v.decode() for k, v in fields.items()}
            row["id"] = entry_id.decode()
            row["at"] = float(row["at"])
            row["detail"] = json.loads(row["detail"])
            row.setdefault("tenant", "")
            if tenants is not None and not _within(row["tenant"], tenants):
                continue
            out.append(row)
        return out


def _within(entry_tenant: str, tenants: frozenset[str]) -> bool:
    named = set(entry_tenant.split(",")) if entry_tenant not in ("", "*") else None
    return named is not None and named <= tenants
