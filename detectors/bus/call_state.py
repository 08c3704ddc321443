"""How a call event becomes call state (DESIGN.md §6): the one writer the publisher and
the node reaper (``detectors.bus.liveness``) share.

Each event is appended to the ``events`` stream; the ``call:<id>`` hash takes the last
event (``state``, ``at``, ``json``, the owning ``node`` and its process ``boot``);
``calls:live`` and the owning process's ``node:<node>:<boot>:calls`` set hold the call
until its ``ended`` event. A hash the reaper ended (``reaped`` set) is final: a later
event of that call (a node that comes back, an outbox replayed) is kept in the stream
for the record but changes neither the hash nor the live sets; the script tells the
caller so, and the publisher then takes the call out of the live sets again.

Every key the script touches is the one call hash (Redis Cluster safe); the live sets
are written beside it in the same pipeline.
"""

from __future__ import annotations

import redis
from redis.typing import EncodableT

from detectors.alert_schema import CallEvent
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings

# KEYS: call hash. ARGV: ended (1/0), ttl_s, then field, value pairs. Returns 0 (nothing
# written) when the reaper already ended the call, else 1.
_CALL_HASH = """
if redis.call('HEXISTS', KEYS[1], 'reaped') == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if ARGV[1] == '1' then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
"""

REPLY_INDEX = 1  # the script's reply among the replies queue_call_state queues


class CallStateWriter:
    def __init__(self, client: redis.Redis, settings: BusSettings, boot: str) -> None:
        self.keys = Keys(settings.key_prefix)
        self.settings = settings
        self.boot = boot
        self._script = client.register_script(_CALL_HASH)

    def queue(
        self,
        pipe: redis.client.Pipeline,
        event: CallEvent,
        payload: str,
        reaped: str = "",
        owner: tuple[str, str] | None = None,
    ) -> int:
        """Queue the event's commands; returns how many replies they produce (the
        script's is at ``REPLY_INDEX``). ``owner``: (node id, boot id) of the process
        that owns the call, by default this one; ``reaped``: the reaper's reason."""
        keys, s = self.keys, self.settings
        node, boot = owner or (s.node_id, self.boot)
        pipe.xadd(
            keys.events,
            {"kind": "call_event", "json": payload},
            maxlen=s.events_maxlen,
            approximate=True,
        )
        key = keys.call(event.call_id)
        ended = event.event == "ended"
        fields: dict[str, EncodableT] = {
            "state": event.event,
            "at": event.at.isoformat(),
            "json": payload,
            "node": node,
            "boot": boot,
        }
        if event.numbers is not None:  # ANI/DNIS only sealed, with a keyed ANI hash
            fields |= {"numbers": event.numbers.sealed, "ani_hash": event.numbers.ani_hash}
        if reaped:
            fields["reaped"] = reaped
        args: list[EncodableT] = [1 if ended else 0, s.call_state_ttl_s]
        for name, value in fields.items():
            args += [name, value]
        self._script(keys=[key], args=args, client=pipe)
        mine = keys.node_calls(node, boot)
        if ended:
            pipe.zrem(keys.live_calls, event.call_id)
            pipe.srem(mine, event.call_id)
        else:
            pipe.zadd(keys.live_calls, {event.call_id: event.at.timestamp()})
            pipe.sadd(mine, event.call_id)
        # integrators name calls by their own ids: <system>:<id> -> call id, kept as
        # long as the call's state
        ext = [keys.external_id(system, value) for system, value in event.external_ids.items()]
        for name in ext:
            if ended:
                pipe.set(name, event.call_id, ex=s.call_state_ttl_s)
            else:
                pipe.set(name, event.call_id)
        return 4 + len(ext)

    def unlist(self, pipe: redis.client.Pipeline, call_id: str) -> None:
        """Take a call the reaper ended out of the live sets again (a late event put it
        back)."""
        pipe.zrem(self.keys.live_calls, call_id)
        pipe.srem(self.keys.node_calls(self.settings.node_id, self.boot), call_id)
