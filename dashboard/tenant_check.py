"""Which principals are platform-wide, and the misconfiguration to warn about: a
platform with tenants whose non-admin users or API keys are still platform-wide
(typically created before tenancy, when every principal was). The dashboard logs it at
start and shows it to platform-wide admins on the system page; ``callshield dashboard
principals --platform-wide`` lists them and ``set-tenants`` narrows them.
"""

from __future__ import annotations

import logging
from typing import Any

from dashboard.auth import ApiKeyStore, Role, UserStore
from dashboard.tenancy import load_tenants
from detectors.bus.policy_store import PolicyStore

log = logging.getLogger(__name__)


async def principals(users: UserStore, keys: ApiKeyStore) -> list[dict[str, Any]]:
    """Every user and API key: kind, name, role, tenants (None: platform-wide) and,
    for a key, its id."""
    out: list[dict[str, Any]] = [
        {"kind": "user", "name": u["username"], "role": u["role"], "tenants": u["tenants"]}
        for u in await users.list()
    ]
    out += [
        {
            "kind": "api_key",
            "name": k["name"],
            "id": k["id"],
            "role": k["role"],
            "tenants": k["tenants"],
        }
        for k in await keys.list()
    ]
    return out


async def tenants_configured(
    found: list[dict[str, Any]], policy: PolicyStore | None = None
) -> bool:
    """Whether the platform has tenants: some principal is scoped, or the alert policy
    has a tenant's section."""
    if any(load_tenants(p["tenants"]) is not None for p in found):
        return True
    if policy is None:
        return False
    try:
        stored = await policy.stored()
    except ValueError:  # an unusable stored policy is the policy page's to report
        return False
    return stored is not None and bool(stored.tenants)


async def platform_wide_non_admins(
    users: UserStore, keys: ApiKeyStore, policy: PolicyStore | None = None
) -> list[dict[str, Any]]:
    """The non-admin principals that see every tenant on a platform that has tenants
    (none on a single-tenant platform, where platform-wide is the norm)."""
    found = await principals(users, keys)
    if not await tenants_configured(found, policy):
        return []
    return [
        p
        for p in found
        if load_tenants(p["tenants"]) is None and Role.parse(p["role"]) < Role.ADMIN
    ]


def describe(p: dict[str, Any]) -> str:
    return (
        f"{p['kind']} {p['name']}" + (f" (id {p['id']})" if "id" in p else "") + f" [{p['role']}]"
    )


def warn(found: list[dict[str, Any]]) -> None:
    if found:
        log.warning(
            "tenants are configured but %d non-admin principals are platform-wide (they "
            "see every tenant): %s; narrow each with `callshield dashboard set-tenants` "
            "or PUT /api/v1/users/<name>/tenants, /api/v1/api-keys/<id>/tenants",
            len(found),
            ", ".join(describe(p) for p in found),
        )
