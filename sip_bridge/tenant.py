"""Which tenant a call belongs to (a contact-center platform serving several client
companies): resolved once, when the call starts, from what the PBX/SBC sends.

In order, the first that gives a usable tenant wins:

1. an explicit value: the SIP header ``tenant_header`` (default ``X-CallShield-Tenant``)
   on the INVITE, then a SIPREC metadata extension element named ``tenant``
   (``sip_bridge.sip.siprec``), or the control API's ``tenant`` field; for the other
   attach points, where each platform carries per-call data (``sip_bridge.adapters``):
   a Twilio ``<Parameter name="tenant">``, the AudioHook ``open`` message's
   ``inputVariables``/``customConfig``, the audio-fork metadata, the WHIP request's
   ``X-CallShield-Tenant`` header or ``tenant`` query parameter, the Amazon Connect
   request's ``tenant`` (a contact attribute, passed by the flow's Lambda);
2. the static mapping from the called number: the longest matching DNIS prefix;
3. the static mapping from the signalling source (trunk address): the most specific
   network containing it;
4. the default tenant.

An explicit value is trimmed and lower-cased, then must match the tenant id pattern of
the alert policy (``^[a-z0-9][a-z0-9_-]{0,31}$``). With a list of known tenants
configured, it must also be one of them (or the default tenant). A value that fails is
rejected: counted by origin and reason (``malformed``, ``unknown``, ``conflicting``: two
different values of one origin), logged without echoing more than a few characters of
it, and resolution goes on with the next step, exactly as if it had not been sent. The
call is never refused for it. An unknown tenant therefore never borrows a configured
tenant's rules by name; the tenant it ends up with is the one the static mapping or the
default says, and the call's ``tenant_source`` records which step decided. Without a
list of known tenants any well-formed id is taken: its alerts carry it, and a policy or
mode table that does not name it gives it the global rules (never another tenant's).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from detectors.bus.policy import TENANT_PATTERN
from sip_bridge.stated_counts import shown

log = logging.getLogger(__name__)

TENANT_RE: Final = re.compile(TENANT_PATTERN)
DNIS_PREFIX_RE: Final = re.compile(r"^\+?[0-9*#]{1,32}$")
HEADER_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
MAX_RAW: Final = 256  # longer explicit values are malformed without further look
Origin = Literal[
    "sip_header",
    "siprec_metadata",
    "api",
    "twilio_parameter",
    "audiohook_open",
    "audio_fork_metadata",
    "whip_request",
    "connect_request",
]
# what decided a call's tenant: an explicit origin, or a mapping step, or the default
Source = Origin | Literal["dnis_prefix", "sip_source", "default"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Hint:
    """What one origin said about the call's tenant (every value it sent)."""

    origin: Origin
    values: tuple[str, ...]


def hints_of(origin: Origin, *values: object) -> tuple[Hint, ...]:
    """An adapter's explicit values (JSON fields, headers) as one hint, or none when
    every value is absent or empty. A value that is not a string (a number, an object)
    stands in as its type name, so it is refused as malformed and counted, never read
    as an id (``42`` would otherwise pass)."""
    texts = tuple(
        v if isinstance(v, str) else f"<{type(v).__name__}>"
        for v in values
        if v is not None and v != ""
    )
    return (Hint(origin, texts),) if texts else ()


@dataclass(frozen=True, slots=True)
class Resolved:
    tenant: str
    source: Source
    rejected: tuple[tuple[Origin, str], ...] = ()  # (origin, reason) of refused hints


def check_tenant(value: str, what: str = "tenant") -> str:
    """``value`` if it is a tenant id, else ValueError (for settings)."""
    if not TENANT_RE.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not a tenant id ({TENANT_PATTERN})")
    return value


@dataclass(frozen=True, slots=True)
class TenantRules:
    """The configured resolution (settings ``tenant_*``); ``parse`` validates it."""

    default: str = "default"
    known: frozenset[str] = frozenset()  # empty: any well-formed id
    by_dnis_prefix: tuple[tuple[str, str], ...] = ()  # longest prefix first
    by_source: tuple[tuple[Network, str], ...] = ()  # most specific network first

    @classmethod
    def parse(
        cls,
        default: str = "default",
        known: Iterable[str] = (),
        by_dnis_prefix: Mapping[str, str] | None = None,
        by_source: Mapping[str, str] | None = None,
    ) -> TenantRules:
        """ValueError naming the first bad entry."""
        check_tenant(default, "default tenant")
        names = frozenset(check_tenant(t.strip(), "known tenant") for t in known if t.strip())
        allowed = names | {default}

        def target(value: str, key: str) -> str:
            check_tenant(value, f"tenant of {key!r}")
            if names and value not in allowed:
                raise ValueError(f"tenant {value!r} of {key!r} is not in the known tenants")
            return value

        prefixes = []
        for prefix, tenant in (by_dnis_prefix or {}).items():
            if not DNIS_PREFIX_RE.fullmatch(prefix):
                raise ValueError(f"DNIS prefix {prefix!r}: digits, * or #, optional leading +")
            prefixes.append((prefix, target(tenant, prefix)))
        nets = []
        for net, tenant in (by_source or {}).items():
            try:
                network = ipaddress.ip_network(net.strip(), strict=False)
            except ValueError:
                raise ValueError(f"source {net!r} is not an address or network") from None
            nets.append((network, target(tenant, net)))
        return cls(
            default,
            names,
            tuple(sorted(prefixes, key=lambda p: (-len(p[0]), p[0]))),
            tuple(sorted(nets, key=lambda n: (-n[0].prefixlen, str(n[0])))),
        )

    def accepts(self, tenant: str) -> bool:
        return not self.known or tenant in self.known or tenant == self.default


@dataclass
class TenantResolver:
    """Resolves calls' tenants under ``rules`` and counts how (``stats``, for /metrics).
    Thread-safe (the SIP loop, the API and adapters may each start calls)."""

    rules: TenantRules = field(default_factory=TenantRules)
    stats: Counter[tuple[str, ...]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def resolve(
        self, hints: Sequence[Hint] = (), source: str = "", dnis: str = "", call_id: str = ""
    ) -> Resolved:
        """The call's tenant (module doc). ``source``: the signalling peer's address."""
        rejected: list[tuple[Origin, str]] = []
        found: tuple[str, Source] | None = None
        for hint in hints:
            values = sorted({v.strip() for v in hint.values if v.strip()})
            if not values:
                continue  # absent (or empty): nothing said, nothing to count
            tenant, reason = self._explicit(values)
            if tenant is not None:
                found = (tenant, hint.origin)
                break
            rejected.append((hint.origin, reason))
            log.warning(
                "call %s: tenant from %s rejected (%s): %s",
                call_id or "-",
                hint.origin,
                reason,
                shown(values, "|", 24),
            )
        if found is None:
            found = self._mapped(source, dnis)
        with self._lock:
            for origin, reason in rejected:
                self.stats["rejected", origin, reason] += 1
            self.stats["resolved", found[1]] += 1
        return Resolved(found[0], found[1], tuple(rejected))

    def _explicit(self, values: list[str]) -> tuple[str | None, str]:
        if len(values) > 1:
            return None, "conflicting"
        raw = values[0]
        value = raw.lower()
        if len(raw) > MAX_RAW or not TENANT_RE.fullmatch(value):
            return None, "malformed"
        if not self.rules.accepts(value):
            return None, "unknown"
        return value, ""

    def _mapped(self, source: str, dnis: str) -> tuple[str, Source]:
        r = self.rules
        if dnis:
            for prefix, tenant in r.by_dnis_prefix:
                if dnis.startswith(prefix):
                    return tenant, "dnis_prefix"
        if source and r.by_source:
            try:
                address = ipaddress.ip_address(source.strip("[]"))
            except ValueError:
                address = None
            if address is not None:
                for network, tenant in r.by_source:
                    if address.version == network.version and address in network:
                        return tenant, "sip_source"
        return r.default, "default"

    def snapshot(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            return dict(self.stats)
