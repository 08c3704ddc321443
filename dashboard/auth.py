"""People, machines and sessions (no FastAPI here: the routes' dependencies use it).

- Passwords: argon2id (``argon2-cffi``), rehashed on login when the parameters change;
  an unknown user costs the same verify as a known one.
- Sessions: a random id in Redis (``dash:session:<sid>``, TTL = idle timeout) holding
  the user, role, CSRF token and creation time; the cookie carries the id signed with the
  session key (``itsdangerous``), so a forged or guessed cookie never reaches Redis.
  Idle and absolute expiry are checked against the injected clock, so tests can age one.
- API keys: ``csk_<id>_<secret>``, stored as SHA-256 (high-entropy keys need no slow
  hash), each with a role.
- Tenants: every principal may carry a tenant set (``dashboard.tenancy``); none means
  platform-wide. Users and API keys store theirs; a session copies its user's at login,
  and a password session's principal re-reads it on every request (``deps``), so an
  admin's change (``set_tenants``) applies to the user's live sessions at once. An
  OpenID Connect session keeps its login's claim (its user is not in the store).
- Rate limits: fixed-window counters in Redis, shared by every dashboard process.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import redis.asyncio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from itsdangerous import BadSignature, URLSafeSerializer

from dashboard.keys import DashKeys
from dashboard.tenancy import Tenants, dump_tenants, inside, load_tenants

Clock = Callable[[], float]


class Role(IntEnum):
    """Ordered: a role may do everything the roles below it may."""

    VIEWER = 1
    ANALYST = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str) -> Role:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown role {name!r}") from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a person with a session or a machine with an API key."""

    name: str
    role: Role
    kind: str  # "session" or "api_key"
    sid: str = ""
    csrf: str = ""
    tenants: Tenants = None  # None: platform-wide; else only these tenants' data

    def sees(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    user: str
    role: Role
    csrf: str
    created: float
    tenants: Tenants = None


_USERNAME_MAX = 64


def check_username(name: str) -> str:
    if not name or len(name) > _USERNAME_MAX or not all(c.isalnum() or c in "._-@" for c in name):
        raise ValueError("username must be 1-64 letters, digits or . _ - @")
    return name


class UserStore:
    """``hasher``: argon2id with argon2-cffi's defaults (RFC 9106 low-memory profile)
    unless given; tests pass cheap parameters."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        keys: DashKeys,
        clock: Clock,
        hasher: PasswordHasher | None = None,
    ) -> None:
        self._r, self._k, self._clock = client, keys, clock
        self._hasher = hasher or PasswordHasher()
        self._dummy = self._hasher.hash(secrets.token_urlsafe(16))

    async def create(self, name: str, password: str, role: Role, tenants: Tenants = None) -> None:
        check_username(name)
        if len(password) < 12:
            raise ValueError("password must be at least 12 characters")
        record = {
            "hash": self._hasher.hash(password),
            "role": role.label,
            "created": self._clock(),
            "tenants": dump_tenants(tenants),
        }
        if not await self._r.hsetnx(self._k.users, name, json.dumps(record)):
            raise ValueError(f"user {name!r} already exists")

    async def list(self) -> list[dict[str, Any]]:
        raw = await self._r.hgetall(self._k.users)
        out = []
        for name, body in sorted(raw.items()):
            record = json.loads(body)
            user = name.decode() if isinstance(name, bytes) else str(name)
            tenants = dump_tenants(load_tenants(record.get("tenants")))
            out.append({"username": user, "role": record["role"], "tenants": tenants})
        return out

    async def tenants(self, name: str) -> Tenants:
        """The user's tenant set (None: platform-wide, or no such user)."""
        body = await self._r.hget(self._k.users, name)
        return load_tenants(json.loads(body).get("tenants")) if body else None

    async def current(self, name: str) -> tuple[bool, Tenants]:
        """(whether the user exists, its tenant set): what a session re-reads."""
        body = await self._r.hget(self._k.users, name)
        if body is None:
            return False, None
        return True, load_tenants(json.loads(body).get("tenants"))

    async def set_tenants(
        self, name: str, tenants: Tenants, within: Tenants = None
    ) -> tuple[str, Tenants] | None:
        """Replaces the user's tenant set; (role, the old set), or None when there is
        no such user or (with ``within``) it is not inside those tenants."""
        found: list[tuple[str, Tenants]] = []

        def change(record: dict[str, Any]) -> bool:
            old = load_tenants(record.get("tenants"))
            if not inside(old, within):
                return False
            found.append((str(record["role"]), old))
            record["tenants"] = dump_tenants(tenants)
            return True

        return found[-1] if await _update(self._r, self._k.users, name, change) else None

    async def verify(self, name: str, password: str) -> Role | None:
        """The user's role when the password is right, else None (same cost either way)."""
        body = await self._r.hget(self._k.users, name)
        record = json.loads(body) if body else None
        try:
            self._hasher.verify(record["hash"] if record else self._dummy, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        if record is None:
            return None
        if self._hasher.check_needs_rehash(record["hash"]):
            rehashed = self._hasher.hash(password)

            def change(stored: dict[str, Any]) -> bool:
                stored["hash"] = rehashed  # only the hash: a concurrent tenant change stays
                return True

            await _update(self._r, self._k.users, name, change)
        return Role.parse(record["role"])


async def _update(
    client: redis.asyncio.Redis, key: str, field: str, change: Callable[[dict[str, Any]], bool]
) -> bool:
    """Read-modify-write of one JSON field of a hash under WATCH (retried when another
    writer got there first); False when the field is absent or ``change`` declines."""
    while True:
        async with client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key)
                body = await pipe.hget(key, field)
                if body is None:
                    return False
                record = json.loads(body)
                if not change(record):
                    return False
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.hset(key, field, json.dumps(record))
                await pipe.execute()
                return True
            except redis.WatchError:
                continue


class ApiKeyStore:
    def __init__(self, client: redis.asyncio.Redis, keys: DashKeys, clock: Clock) -> None:
        self._r, self._k, self._clock = client, keys, clock

    @staticmethod
    def _digest(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    async def create(self, name: str, role: Role, tenants: Tenants = None) -> tuple[str, str]:
        """(key id, the key): the key is shown once and stored only as its digest."""
        check_username(name)
        key_id = secrets.token_hex(6)
        key = f"csk_{key_id}_{secrets.token_urlsafe(32)}"
        record = {
            "id": key_id,
            "name": name,
            "role": role.label,
            "created": self._clock(),
            "tenants": dump_tenants(tenants),
        }
        await self._r.hset(self._k.api_keys, self._digest(key), json.dumps(record))
        return key_id, key

    async def list(self) -> list[dict[str, Any]]:
        raw = await self._r.hvals(self._k.api_keys)
        records = [json.loads(v) for v in raw]
        return sorted(
            (
                {
                    "id": r["id"],
                    "name": r["name"],
                    "role": r["role"],
                    "tenants": dump_tenants(load_tenants(r.get("tenants"))),
                }
                for r in records
            ),
            key=lambda r: str(r["name"]),
        )

    async def revoke(self, key_id: str, within: Tenants = None) -> bool:
        """Deletes the key; with ``within``, only a key scoped inside those tenants."""
        for digest, body in (await self._r.hgetall(self._k.api_keys)).items():
            record = json.loads(body)
            if record["id"] == key_id:
                if within is not None and not inside(load_tenants(record.get("tenants")), within):
                    return False
                return bool(await self._r.hdel(self._k.api_keys, digest))
        return False

    async def set_tenants(
        self, key_id: str, tenants: Tenants, within: Tenants = None
    ) -> tuple[str, str, Tenants] | None:
        """Replaces the key's tenant set (it applies at the key's next request); (name,
        role, the old set), or None when there is no such key or (with ``within``) it
        is not inside those tenants."""
        raw = await self._r.hgetall(self._k.api_keys)
        digest = next((d for d, b in raw.items() if json.loads(b)["id"] == key_id), None)
        if digest is None:
            return None
        found: list[tuple[str, str, Tenants]] = []

        def change(record: dict[str, Any]) -> bool:
            old = load_tenants(record.get("tenants"))
            if not inside(old, within):
                return False
            found.append((str(record["name"]), str(record["role"]), old))
            record["tenants"] = dump_tenants(tenants)
            return True

        field = digest.decode() if isinstance(digest, bytes) else str(digest)
        ok = await _update(self._r, self._k.api_keys, field, change)
        return found[-1] if ok else None

    async def lookup(self, key: str) -> Principal | None:
        if not key.startswith("csk_"):
            return None
        body = await self._r.hget(self._k.api_keys, self._digest(key))
        if body is None:
            return None
        record = json.loads(body)
        return Principal(
            name=f"key:{record['name']}",
            role=Role.parse(record["role"]),
            kind="api_key",
            tenants=load_tenants(record.get("tenants")),
        )


class SessionStore:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        keys: DashKeys,
        clock: Clock,
        secret: bytes,
        idle_s: int,
        max_s: int,
    ) -> None:
        self._r, self._k, self._clock = client, keys, clock
        self._signer = URLSafeSerializer(secret, salt="callshield-dashboard-session")
        self._idle_s, self._max_s = idle_s, max_s

    async def create(self, user: str, role: Role, tenants: Tenants = None) -> tuple[Session, str]:
        """A new session and its signed cookie value."""
        session = Session(
            secrets.token_urlsafe(24), user, role, secrets.token_urlsafe(32), self._clock(), tenants
        )
        await self._save(session)
        return session, self._signer.dumps(session.sid)

    async def _save(self, session: Session) -> None:
        body = {
            "user": session.user,
            "role": session.role.label,
            "csrf": session.csrf,
            "created": session.created,
            "seen": self._clock(),
            "tenants": dump_tenants(session.tenants),
        }
        await self._r.set(self._k.session(session.sid), json.dumps(body), ex=self._idle_s)

    async def load(self, cookie: str) -> Session | None:
        """The live session behind a cookie; touches it (sliding idle timeout)."""
        try:
            sid = self._signer.loads(cookie)
        except BadSignature:
            return None
        if not isinstance(sid, str):
            return None
        body = await self._r.get(self._k.session(sid))
        if body is None:
            return None
        record = json.loads(body)
        now = self._clock()
        if (
            now - float(record["seen"]) > self._idle_s
            or now - float(record["created"]) > self._max_s
        ):
            await self._r.delete(self._k.session(sid))
            return None
        session = Session(
            sid,
            record["user"],
            Role.parse(record["role"]),
            record["csrf"],
            record["created"],
            load_tenants(record.get("tenants")),
        )
        await self._save(session)
        return session

    async def delete(self, sid: str) -> None:
        await self._r.delete(self._k.session(sid))


def tokens_equal(a: str, b: str) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


class RateLimiter:
    """At most ``limit`` hits per ``window_s`` for one (what, who); fixed windows."""

    def __init__(
        self, client: redis.asyncio.Redis, keys: DashKeys, limit: int, window_s: int
    ) -> None:
        self._r, self._k, self._limit, self._window = client, keys, limit, window_s

    async def hit(self, what: str, who: str) -> bool:
        """Counts one hit; False when the limit is exceeded."""
        key = self._k.rate(what, hashlib.sha256(who.encode()).hexdigest()[:32])
        pipe = self._r.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, self._window, nx=True)
        count, _ = await pipe.execute()
        return int(count) <= self._limit

    async def retry_after(self, what: str, who: str) -> int:
        """Counts one hit; 0 within the limit, else the seconds until the window ends."""
        key = self._k.rate(what, hashlib.sha256(who.encode()).hexdigest()[:32])
        pipe = self._r.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, self._window, nx=True)
        pipe.ttl(key)
        count, _, ttl = await pipe.execute()
        return 0 if int(count) <= self._limit else max(1, int(ttl))

    async def reset(self, what: str, who: str) -> None:
        await self._r.delete(self._k.rate(what, hashlib.sha256(who.encode()).hexdigest()[:32]))
