"""ANI velocity across the cluster, in Redis, by keyed ANI hash only (never the number).

Per hash three sorted sets of call ids (``Keys.ani_counter``): ``live`` scored by the
time the entry lapses (now + ``live_ttl_s``; removed when the call ends, so a node
that dies leaves entries that lapse on their own), ``recent`` scored by the call's
start, trimmed to ``recent_window_s``, and ``attested`` (calls verified with A or B
attestation, trimmed to ``attested_ttl_s``). Each key expires with its longest entry, so
a number that stops calling leaves nothing behind. A call is added once (``NX``): its
updates do not move its start. One round trip (MULTI/EXEC) per observation.
"""

from __future__ import annotations

from typing import Any

import redis

from detectors.bus.keys import Keys
from detectors.caller_id.rules import CallerIdConfig, Velocity


class AniVelocity:
    def __init__(self, client: redis.Redis, keys: Keys, config: CallerIdConfig) -> None:
        self.client, self.keys, self.config = client, keys, config

    def _keys(self, ani_hash: str) -> tuple[str, str, str]:
        k = self.keys
        return (
            k.ani_counter("live", ani_hash),
            k.ani_counter("recent", ani_hash),
            k.ani_counter("attested", ani_hash),
        )

    def observe(self, call_id: str, ani_hash: str, attested: bool, now: float) -> Velocity:
        """Count this call on its ANI hash and read the hash's velocity (``now``: Unix s)."""
        if not ani_hash:
            return Velocity()
        c = self.config
        live, recent, att = self._keys(ani_hash)
        p: Any = self.client.pipeline(transaction=True)
        p.zremrangebyscore(live, "-inf", now)
        p.zadd(live, {call_id: now + c.live_ttl_s}, nx=True)
        p.expire(live, int(c.live_ttl_s) + 1)
        p.zremrangebyscore(recent, "-inf", now - c.recent_window_s)
        p.zadd(recent, {call_id: now}, nx=True)
        p.expire(recent, int(c.recent_window_s) + 1)
        p.zremrangebyscore(att, "-inf", now - c.attested_ttl_s)
        p.zrem(att, call_id)  # "before": this call's own attestation does not count
        p.zcard(att)
        if attested:
            p.zadd(att, {call_id: now})
            p.expire(att, int(c.attested_ttl_s) + 1)
        p.zcard(live)
        p.zcard(recent)
        out = p.execute()
        attested_before = int(out[8])
        return Velocity(int(out[-2]), int(out[-1]), attested_before)

    def end(self, call_id: str, ani_hash: str) -> None:
        """The call ended: no longer concurrent (it stays among the recent ones)."""
        if ani_hash:
            self.client.zrem(self._keys(ani_hash)[0], call_id)
