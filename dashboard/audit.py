"""The audit log of analyst and admin actions: a Redis stream (``dash:audit``).

Each entry names who, with which role, did what to which object, and when. Free text
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


class AuditLog:
    def __init__(
        self, client: redis.asyncio.Redis, keys: DashKeys, clock: Callable[[], float], maxlen: int
    ) -> None:
        self._r, self._k, self._clock, self._maxlen = client, keys, clock, maxlen

    async def record(self, who: Principal, action: str, target: str, /, **detail: Any) -> None:
        await self.record_as(who.name, who.role.label, who.kind, action, target, **detail)

    async def record_as(
        self, actor: str, role: str, via: str, action: str, target: str, /, **detail: Any
    ) -> None:
        """An entry for someone who is not (yet) a principal: a login, a refused one."""
        fields = {
            "at": repr(self._clock()),
            "actor": actor,
            "role": role,
            "via": via,
            "action": action,
            "target": target,
            "detail": json.dumps(detail, sort_keys=True),
        }
        await self._r.xadd(self._k.audit, fields, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]

    async def recent(self, count: int = 200) -> list[dict[str, Any]]:
        out = []
        entries: Any = await self._r.xrevrange(self._k.audit, count=count)
        for entry_id, fields in entries:
            row: dict[str, Any] = {k.decode(): v.decode() for k, v in fields.items()}
            row["id"] = entry_id.decode()
            row["at"] = float(row["at"])
            row["detail"] = json.loads(row["detail"])
            out.append(row)
        return out
