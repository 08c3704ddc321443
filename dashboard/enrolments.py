"""Customer enrolments for the enrolments page: the tenant's ``enrol:<tenant>:<subject>``
keys (SCAN, bounded), each shown by an opaque reference and a masked account id, never
the account id itself or the voiceprint. Removing or expiring one goes by that reference
(``dashboard.routes.enrolments``)."""

from __future__ import annotations

import hashlib
from typing import Any

import redis.asyncio

from detectors.bus.acl import glob_escape
from detectors.bus.biometrics import Enrolment
from detectors.bus.keys import Keys

MAX_LISTED = 2000  # enrolments one page lists (a larger tenant: use the API by subject)
_KEEP = 4  # account id characters left visible


def ref_of(tenant: str, subject: str) -> str:
    """The enrolment's reference on the page and in the by-ref routes."""
    return "en_" + hashlib.sha256(f"{tenant}\0{subject}".encode()).hexdigest()[:20]


def mask_account(subject: str) -> str:
    """All but the last four characters hidden (``•••••5678``); short ids wholly."""
    if len(subject) <= 2 * _KEEP:
        return "•" * len(subject)
    return "•" * (len(subject) - _KEEP) + subject[-_KEEP:]


async def list_enrolments(
    client: redis.asyncio.Redis, keys: Keys, tenant: str
) -> tuple[list[Enrolment], int]:
    """The tenant's enrolments (at most ``MAX_LISTED``) and how many did not parse."""
    head = keys.enrolment(tenant, "")
    out: list[Enrolment] = []
    bad = 0
    async for key in client.scan_iter(match=f"{glob_escape(head)}*", count=500, _type="string"):
        body: Any = await client.get(key)
        if body is None:
            continue
        try:
            out.append(Enrolment.model_validate_json(body))
        except ValueError:
            bad += 1
        if len(out) >= MAX_LISTED:
            break
    return sorted(out, key=lambda e: (e.created_at, e.subject)), bad


async def find(client: redis.asyncio.Redis, keys: Keys, tenant: str, ref: str) -> Enrolment | None:
    found, _ = await list_enrolments(client, keys, tenant)
    return next((e for e in found if ref_of(tenant, e.subject) == ref), None)


def row(e: Enrolment, now_expired: bool) -> dict[str, Any]:
    """What the page and the list API show of one enrolment."""
    return {
        "ref": ref_of(e.tenant, e.subject),
        "subject": mask_account(e.subject),
        "tenant": e.tenant,
        "consent_ref": mask_account(e.consent_ref),
        "model": e.model,
        "net_speech_s": e.net_speech_s,
        "added_by": e.added_by,
        "created_at": e.created_at,
        "expires_at": e.expires_at,
        "expired": now_expired,
    }
