"""Tenant scoping of principals (no FastAPI here; ``dashboard.scoping`` has the routes'
checks).

A principal (user, session, API key) carries ``Tenants``: ``None`` is platform-wide
(every tenant), a frozenset limits it to those tenants' calls, alerts, evidence,
watchlists, enrolments, allowlists and policy sections. Stored as a JSON list, or
``null`` for platform-wide; a record written before tenants existed has none and is
platform-wide (those principals predate multi-tenancy; an admin narrows them by
re-creating them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from detectors.bus.biometrics import TENANT_PATTERN

Tenants = frozenset[str] | None
MAX_TENANTS = 64
_TENANT = re.compile(TENANT_PATTERN)


def parse_tenants(values: Iterable[str] | None) -> Tenants:
    """A checked tenant set from user input; ``None`` or nothing given: platform-wide."""
    if values is None:
        return None
    found = frozenset(v.strip() for v in values if v.strip())
    if not found:
        return None
    bad = sorted(t for t in found if not _TENANT.match(t))
    if bad:
        raise ValueError(f"invalid tenant names {bad} (lower-case letters, digits, _ and -)")
    if len(found) > MAX_TENANTS:
        raise ValueError(f"at most {MAX_TENANTS} tenants per principal")
    return found


def load_tenants(raw: Any) -> Tenants:
    """From a stored record: a list, or ``None``/absent for platform-wide."""
    if raw is None:
        return None
    return frozenset(str(t) for t in raw)


def dump_tenants(tenants: Tenants) -> list[str] | None:
    return None if tenants is None else sorted(tenants)


def inside(inner: Tenants, outer: Tenants) -> bool:
    """Whether a principal scoped to ``inner`` sees nothing ``outer`` does not."""
    if outer is None:
        return True
    return inner is not None and inner <= outer


def label(tenants: Tenants) -> str:
    """For the audit log and pages: ``*`` is platform-wide."""
    return "*" if tenants is None else ",".join(sorted(tenants))


def narrow(tenants: Tenants, wanted: str | None) -> Tenants:
    """The tenants a listing shows: the principal's, narrowed to ``wanted`` when a
    filter names one (a tenant the principal does not see: nothing)."""
    if wanted is None:
        return tenants
    return frozenset({wanted}) if tenants is None or wanted in tenants else frozenset()


def assignable(user: dict[str, Any], tenants: Tenants) -> bool:
    """Whether a listed user (``UserStore.list``) may be offered to a principal of
    ``tenants``: users inside its tenants only, so a scoped admin or analyst never sees
    other tenants' people."""
    return inside(load_tenants(user.get("tenants")), tenants)


def sees(user: dict[str, Any], tenant: str) -> bool:
    """Whether a listed user or key sees ``tenant``."""
    tenants = load_tenants(user.get("tenants"))
    return tenants is None or tenant in tenants
