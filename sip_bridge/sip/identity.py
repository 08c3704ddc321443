"""Caller identity inputs of a call, for fraud scoring: who the signalling says calls
(From, P-Asserted-Identity), what STIR/SHAKEN vouches for (the Identity header's
PASSporT, :mod:`sip_bridge.sip.passport`), and how the call was diverted on its way
(Diversion, RFC 5806; History-Info, RFC 7044 with RFC 4458 ``cause`` values).

The :class:`CallerIdentity` holds numbers and never leaves the bridge's memory as is:
:meth:`CallerIdentity.info` is the number-free summary call events carry (attestation,
verification status, origid, diversion count and reasons, and whether numbers *match*),
while the numbers themselves leave only sealed (``detectors.bus.numbers``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field, replace
from typing import Final

from detectors.alert_schema import CallerIdentityInfo
from sip_bridge.sip.fields import NameAddr, SipUri
from sip_bridge.sip.message import Headers, SipParseError
from sip_bridge.sip.passport import (
    Passport,
    PassportError,
    TrustStore,
    Verification,
    tn_digits,
    verify,
)

MAX_CHAIN: Final = 16  # Diversion / History-Info entries read at most
_REASON_RE: Final = re.compile(r"[^a-z0-9-]")
# RFC 4458 cause values (History-Info / voicemail URIs) as RFC 5806 reason names.
CAUSES: Final = {
    302: "unconditional",
    404: "unknown",
    408: "no-answer",
    480: "unavailable",
    486: "user-busy",
    487: "deflection",
    503: "unavailable",
    380: "follow-me",
}


def _number(value: str | None) -> str:
    """The user part (telephone number) of a name-addr or URI; "" when there is none."""
    if not value:
        return ""
    try:
        addr = NameAddr.parse(value)
        return SipUri.parse(addr.uri).user.partition(";")[0]
    except SipParseError:
        return ""


def _reason(text: str) -> str:
    return _REASON_RE.sub("", text.strip().strip('"').lower())[:32] or "unknown"


@dataclass(frozen=True, slots=True)
class Diversions:
    """The call's redirections, most recent first as the headers list them."""

    count: int = 0
    reasons: tuple[str, ...] = ()
    original_called: str = ""  # the number first dialled (in memory only)
    source: str = ""  # "diversion", "history-info" or "" for none

    @classmethod
    def from_diversion(cls, values: list[str]) -> Diversions:
        """RFC 5806: the top entry is the last diversion; ``counter`` counts the
        diversions at that hop (1 when absent); the bottom entry names the number the
        caller dialled."""
        entries = []
        for value in values[:MAX_CHAIN]:
            try:
                entries.append(NameAddr.parse(value))
            except SipParseError:
                continue
        if not entries:
            return cls()
        count = 0
        for e in entries:
            counter = (e.params.get("counter") or "1")[:2]
            count += int(counter) if counter.isascii() and counter.isdigit() else 1
        reasons = tuple(_reason(e.params.get("reason") or "unknown") for e in entries)
        return cls(count, reasons, _number(str(entries[-1])), "diversion")

    @classmethod
    def from_history_info(cls, values: list[str]) -> Diversions:
        """RFC 7044: entries in index order; one tagged ``mp`` (mapped: retargeted to
        another AOR) is a diversion, its reason the ``cause`` (RFC 4458) of its own
        URI or the SIP cause of the ``Reason`` the entry before it escaped into its URI.
        The original called number is the first entry's."""
        entries: list[tuple[NameAddr, SipUri]] = []
        for value in values[:MAX_CHAIN]:
            try:
                addr = NameAddr.parse(value)
                entries.append((addr, SipUri.parse(addr.uri)))
            except SipParseError:
                continue
        if not entries:
            return cls()
        reasons: list[str] = []
        for i, (addr, uri) in enumerate(entries):
            if "mp" not in addr.params:
                continue
            cause = uri.params.get("cause") or ""
            if not cause and i > 0:
                cause = _escaped_cause(entries[i - 1][1].headers)
            reasons.append(_cause_reason(cause))
        return cls(
            len(reasons), tuple(reasons), entries[0][1].user.partition(";")[0], "history-info"
        )


def _escaped_cause(uri_headers: str) -> str:
    """``Reason=SIP%3Bcause%3D302%3Btext%3D...`` in a URI's headers -> "302"."""
    for part in uri_headers.split("&"):
        name, _, value = part.partition("=")
        if name.strip().lower() == "reason":
            text = urllib.parse.unquote(value)
            m = re.search(r"cause\s*=\s*(\d{3})", text, re.IGNORECASE)
            if m and text.strip().upper().startswith("SIP"):
                return m.group(1)
    return ""


def _cause_reason(cause: str) -> str:
    if cause.isdigit() and len(cause) == 3:
        return CAUSES.get(int(cause), f"sip-{cause}")
    return "unknown"


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    """Identity inputs of one call, numbers included (bridge memory only)."""

    from_number: str = ""
    pai_number: str = ""
    to_number: str = ""
    privacy: bool = False  # Privacy: id / user / header (RFC 3323/3325)
    attestation: str | None = None
    origid: str | None = None
    orig_tn: str = ""
    dest_tns: tuple[str, ...] = ()
    verification: str = "absent"  # absent, verified, failed, unverified
    verification_reason: str = ""
    diversions: Diversions = field(default_factory=Diversions)

    @property
    def caller_number(self) -> str:
        return self.pai_number or self.from_number

    def info(self) -> CallerIdentityInfo:
        """The number-free summary for call events."""
        return CallerIdentityInfo(
            attestation=self.attestation if self.attestation in ("A", "B", "C") else None,  # type: ignore[arg-type]
            verification=self.verification,  # type: ignore[arg-type]
            verification_reason=self.verification_reason,
            origid=self.origid,
            has_pai=bool(self.pai_number),
            privacy=self.privacy,
            pai_matches_from=_match(self.pai_number, self.from_number),
            orig_tn_matches_caller=_match(self.orig_tn, self.caller_number),
            dest_tn_matches_called=(
                any(tn_digits(t) == tn_digits(self.to_number) for t in self.dest_tns)
                if self.dest_tns and tn_digits(self.to_number)
                else None
            ),
            diversion_count=self.diversions.count,
            diversion_reasons=list(self.diversions.reasons),
            diversion_source=self.diversions.source or None,  # type: ignore[arg-type]
            original_called_matches_called=_match(self.diversions.original_called, self.to_number),
        )


def _values(headers: Headers, name: str) -> list[str]:
    """A list header's values; none when its quoting is broken (the rest still counts)."""
    try:
        return headers.get_all(name)[:MAX_CHAIN]
    except SipParseError:
        return []


def _match(a: str, b: str) -> bool | None:
    """Whether two numbers are the same (digits only); None when either is unknown."""
    da, db = tn_digits(a), tn_digits(b)
    return da == db if da and db else None


def caller_identity(
    headers: Headers,
    *,
    request_uri: str = "",
    trust: TrustStore | None = None,
    now: float = 0.0,
    parties: tuple[str, str] | None = None,
) -> CallerIdentity:
    """Read a request's identity headers; ``now`` is wall-clock (Unix) seconds.
    ``parties`` (caller, called) replaces From/PAI and To where they name someone else
    (a SIPREC INVITE's come from the recording client)."""
    if parties is not None:
        from_number, pai, to_number = parties[0], "", parties[1]
    else:
        from_number = _number(headers.get("From"))
        pais = [_number(v) for v in _values(headers, "P-Asserted-Identity")[:2]]
        pai = next((p for p in pais if tn_digits(p)), next((p for p in pais if p), ""))
        to_number = _number(headers.get("To")) or _number(f"<{request_uri}>")
    privacy_values = {v.strip().lower() for v in (headers.get("Privacy") or "").split(";")}
    diversion_values = _values(headers, "Diversion")
    if diversion_values:
        diversions = Diversions.from_diversion(diversion_values)
    else:
        diversions = Diversions.from_history_info(_values(headers, "History-Info"))
    base = CallerIdentity(
        from_number=from_number,
        pai_number=pai,
        to_number=to_number,
        privacy=bool(privacy_values & {"id", "user", "header"}),
        diversions=diversions,
    )
    passport, result = _passport(headers.get_all("Identity"), trust, base.caller_number, now)
    if result is None:
        return base
    base = replace(base, verification=result.status, verification_reason=result.reason)
    if passport is None:
        return base
    return replace(
        base,
        attestation=passport.attest,
        origid=passport.origid,
        orig_tn=passport.orig_tn,
        dest_tns=passport.dest_tns,
    )


def _passport(
    values: list[str], trust: TrustStore | None, caller: str, now: float
) -> tuple[Passport | None, Verification | None]:
    """The SHAKEN PASSporT among the Identity headers (a ``div`` one, RFC 8946, is
    skipped), and its verification; (None, None) when there is none."""
    if not values:
        return None, None
    malformed = False
    for value in values[:4]:
        try:
            p = Passport.parse(value)
        except PassportError:
            malformed = True
            continue
        if p.ppt not in ("shaken", ""):
            continue
        return p, verify(p, trust, caller, now)
    if malformed:
        return None, Verification("failed", "malformed")
    return None, None
