"""The alert policy in Redis (``detectors.bus.keys``: ``policy``, ``policy:version``,
``policy:counter``).

``PolicyStore`` (asyncio) is what writes: the dashboard's admin routes. Applying a
policy takes the next counter (INCR), versions the policy with it and its content hash,
and writes the policy and its version in one MULTI, so a reader that sees a version
also sees that version's policy. The module-level ``read_*`` functions are the bridge's
side (synchronous, on the policy watcher's thread, never on the scoring path). A stored
policy that does not parse, or whose version does not match its content, is an error
the caller counts; the bridge keeps the policy it runs.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from detectors.bus.keys import Keys
from detectors.bus.policy import Policy, PolicyBody


class PolicyConflictError(Exception):
    """The policy changed since the version the admin edited."""


def _s(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_stored(body: Any) -> Policy:
    """A stored policy; ValueError when it does not parse or its version is not its
    content's."""
    text = _s(body)
    if text is None:
        raise ValueError("no policy stored")
    policy = Policy.model_validate_json(text)
    policy.check_version()
    return policy


def read_version(client: redis.Redis, keys: Keys) -> str | None:
    """The stored policy's version (None: none stored, the built-in policy applies)."""
    return _s(client.get(keys.policy_version))


def read_policy(client: redis.Redis, keys: Keys) -> Policy | None:
    """The stored policy (None: none stored). ValueError: stored but unusable."""
    with client.pipeline(transaction=True) as p:
        p.get(keys.policy_version)
        p.get(keys.policy)
        version, body = p.execute()
    if version is None and body is None:
        return None
    policy = parse_stored(body)
    if policy.version != _s(version):
        raise ValueError(f"policy version key {_s(version)!r} is not the policy's")
    return policy


class PolicyStore:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys) -> None:
        self._r, self._k = client, keys

    @property
    def client(self) -> redis.asyncio.Redis:
        return self._r

    async def stored(self) -> Policy | None:
        """The stored policy, None when none is (ValueError: unusable)."""
        body: Any = await self._r.get(self._k.policy)
        return None if body is None else parse_stored(body)

    async def current(self) -> Policy:
        """What bridges run: the stored policy, or the built-in one."""
        return await self.stored() or Policy()

    async def apply(self, body: PolicyBody, base_version: str | None = None) -> Policy:
        """Store ``body`` as the next version. With ``base_version``, refuse
        (PolicyConflictError) when the current version is another."""
        if base_version is not None:
            current = _s(await self._r.get(self._k.policy_version)) or Policy().version
            if current != base_version:
                raise PolicyConflictError(
                    f"the policy is at version {current}, not {base_version}: reload and retry"
                )
        counter = int(await self._r.incr(self._k.policy_counter))
        policy = body.versioned(counter)
        async with self._r.pipeline(transaction=True) as p:
            p.set(self._k.policy, policy.model_dump_json())
            p.set(self._k.policy_version, policy.version)
            await p.execute()
        return policy
