"""Which party each leg of a plain SIP fork carries, as the PBX says it (issue 10:
audio provenance).

A PBX forking a call's media to the bridge with an ordinary INVITE (not SIPREC: no
metadata) sends one audio m-line per direction it forks, or one of both parties mixed.
Nothing in SDP says which is which, so without a word from the PBX every leg of such a
call is ``mixed`` (``role_source`` ``m_line_guess``) and voice detectors abstain on it
(``leg_unknown``, DESIGN §2). The PBX can say it two ways (each an *origin*, counted
apart):

- ``sip_header``: a header on the INVITE (``leg_roles_header``, default
  ``X-CallShield-Leg-Roles``) listing the role of each *audio* m-line of its SDP, in
  order, comma-separated (several header lines are read as one list, RFC 3261 §7.3.1):
  ``X-CallShield-Leg-Roles: external,internal``. A PBX forking only the caller's
  direction sends one ``sendonly`` m-line and ``X-CallShield-Leg-Roles: external``.
- ``sdp_label``: an m-line's ``a=label:`` (RFC 4574) whose whole value, trimmed and
  case-insensitive, is a role word. RFC 4574 labels are free text (SIPREC uses them as
  stream ids, "1", "96757"), so only these four exact values map; anything else
  (``caller``, ``agent``, ``ext``, ``1``) is a label, not a role, and is not counted.

Role words: ``external`` (the outside party), ``internal`` (the agent, IVR or callee
inside), ``mixed`` (both parties on one stream), ``unknown``. ``caller``/``callee`` are
deliberately not roles: on an outbound call the caller is the internal party.

- ``api``: ``PUT /v1/calls/{id}/leg-roles`` (also by an external id such as the fork's
  ``sip-call-id``), for a PBX that cannot add a header to its fork.

Precedence: the control API's role for an m-line wins and stays until the line is
removed (a later header or label for that line is counted ``overridden``); then a valid
header decides every audio m-line of its SDP (labels are then not read; one that names
a different role is counted ``overridden``); without one, role labels decide their
lines; lines nobody names are ``mixed`` (``m_line_guess``), as before. SIPREC calls take
roles from their metadata only: the header on a SIPREC INVITE is counted ``siprec`` and
ignored, their labels are stream ids, and the API refuses them (``not_plain_sip``), as
it does adapters' calls (vendor tracks) and its own (``PATCH`` sets those).

A bad header is refused whole (a half-read list could call the agent ``external``, and
the internal leg must never be embedded): counted by origin and reason (``malformed``:
an entry not a word of letters, ``-`` and ``_`` up to 32 characters; ``unknown``: a word
not a role; ``count_mismatch``: not one entry per audio m-line) and ignored, the legs
staying as without it. SIP never refuses a call or an update for it. The API's roles
are likewise all or nothing: 422 (``malformed``, ``unknown``), 404 (``no_such_leg``),
409 (``not_plain_sip``), counted under origin ``api``.

Re-INVITE / UPDATE with SDP: m-lines keep their position (RFC 3264 §8), so a role stays
with its m-line index. A valid header restates every audio m-line of the new SDP (a role
can change, e.g. after a transfer re-anchors a stream); without one, role labels restate
their lines and every other line keeps the role it had; an added line nobody names is
``mixed``. A line removed (port 0, or gone) forgets its role, so a line later re-used at
that position starts from the default. A re-INVITE without SDP reads the header against
the session's current SDP. Counting (``taken``): a restatement is not counted again (a
line's role from the same origin, or a whole statement equal to the call's previous one,
as RFC 4028 session refreshes re-send every few minutes, refusals included); a change
counts the lines it changes.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from detectors.alert_schema import LegRole
from sip_bridge.stated_counts import Snapshot, StatedCollector, shown

log = logging.getLogger(__name__)

ROLE_WORDS: Final = {r.value: r for r in LegRole}
WORD_RE: Final = re.compile(r"^[a-z_-]{1,32}$")
Origin = Literal["sip_header", "sdp_label", "api"]
Reason = Literal[
    "malformed", "unknown", "count_mismatch", "siprec", "overridden", "no_such_leg", "not_plain_sip"
]


@dataclass(frozen=True, slots=True)
class RoleStatement:
    """What one plain SIP INVITE, re-INVITE or UPDATE says about its legs."""

    header: tuple[str, ...] | None  # the header's entries, comma lists split (None: absent)
    audio: tuple[int, ...]  # the m-line index of each audio m-line of its SDP, in order
    labels: tuple[tuple[int, str], ...] = ()  # (m-line index, a=label) of audio lines


@dataclass(frozen=True, slots=True)
class Decision:
    """A statement read: the roles it gives by m-line index (with their origin) and
    what to count (``said``: a role taken; ``rejected``: a value ignored, and why)."""

    roles: dict[int, tuple[LegRole, Origin]] = field(default_factory=dict)
    said: tuple[tuple[Origin, LegRole], ...] = ()
    rejected: tuple[tuple[Origin, Reason], ...] = ()


def label_role(label: str | None) -> LegRole | None:
    """The role an ``a=label`` names (its whole value a role word), else None."""
    if label is None:
        return None
    return ROLE_WORDS.get(label.strip().lower())


def read_header(entries: tuple[str, ...], audio_lines: int) -> tuple[LegRole, ...] | Reason:
    """The roles a header lists, or why it is refused; pure."""
    words = [e.strip().lower() for e in entries]
    if any(not WORD_RE.fullmatch(w) for w in words):
        return "malformed"
    if any(w not in ROLE_WORDS for w in words):
        return "unknown"
    if len(words) != audio_lines:
        return "count_mismatch"
    return tuple(ROLE_WORDS[w] for w in words)


def decide(statement: RoleStatement) -> Decision:
    """The roles ``statement`` gives (module doc: header first, then role labels)."""
    labelled = {i: r for i, lab in statement.labels if (r := label_role(lab)) is not None}
    entries = statement.header
    if entries is None or not any(e.strip() for e in entries):
        return Decision(
            {i: (r, "sdp_label") for i, r in labelled.items()},
            tuple(("sdp_label", r) for r in labelled.values()),
        )
    read = read_header(entries, len(statement.audio))
    if isinstance(read, str):
        return Decision(
            {i: (r, "sdp_label") for i, r in labelled.items()},
            tuple(("sdp_label", r) for r in labelled.values()),
            (("sip_header", read),),
        )
    roles = dict(zip(statement.audio, read, strict=True))
    overridden = sum(1 for i, r in labelled.items() if roles.get(i, r) is not r)
    return Decision(
        {i: (r, "sip_header") for i, r in roles.items()},
        tuple(("sip_header", r) for r in read),
        (("sdp_label", "overridden"),) * overridden,
    )


def taken(decision: Decision, held: Mapping[int, tuple[LegRole, Origin]]) -> Decision:
    """``decision`` saying only the roles it changes, pure: a line that already has that
    role from that origin (a restatement, e.g. a session refresh) or whose role the
    control API holds (not taken) is not said again; roles and refusals unchanged."""
    said = tuple(
        (origin, role)
        for index, (role, origin) in decision.roles.items()
        if (now := held.get(index)) != (role, origin) and (now is None or now[1] != "api")
    )
    return replace(decision, said=said)


def read_api(said: dict[str, str], legs: dict[str, int]) -> dict[int, LegRole] | Reason:
    """The control API's roles by m-line index, or why refused (all or nothing); pure.
    ``said`` keys: a leg id, or a live leg's m-line index in decimal; ``legs``: leg id ->
    m-line index of the call's live legs."""
    out: dict[int, LegRole] = {}
    for key, value in said.items():
        word = value.strip().lower()
        if not WORD_RE.fullmatch(word):
            return "malformed"
        if word not in ROLE_WORDS:
            return "unknown"
        index = legs.get(key)
        if index is None and key.isdecimal() and int(key) in legs.values():
            index = int(key)
        if index is None:
            return "no_such_leg"
        out[index] = ROLE_WORDS[word]
    return out


@dataclass
class LegRoleStats:
    """Counts what every origin said (``stats``, for /metrics); thread-safe."""

    stats: Counter[tuple[str, ...]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, decision: Decision, entries: tuple[str, ...] | None, call_id: str) -> None:
        """Record a decision; a refused header is logged (shortened)."""
        with self._lock:
            for origin, role in decision.said:
                self.stats["said", origin, role.value] += 1
            for origin, reason in decision.rejected:
                self.stats["rejected", origin, reason] += 1
        for origin, reason in decision.rejected:
            log.warning(
                "call %s: leg roles from %s ignored (%s): %s",
                call_id or "-",
                origin,
                reason,
                shown(entries or (), ",", 40) if origin == "sip_header" else "a=label",
            )

    def reject(self, origin: Origin, reason: Reason, call_id: str) -> None:
        with self._lock:
            self.stats["rejected", origin, reason] += 1
        log.warning("call %s: leg roles from %s ignored (%s)", call_id or "-", origin, reason)

    def snapshot(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            return dict(self.stats)


def leg_role_collector(snapshot: Snapshot) -> StatedCollector:
    """``callshield_leg_role_total{origin,role}`` (roles taken, one per m-line) and
    ``callshield_leg_role_rejected_total{origin,reason}`` (values ignored)."""
    return StatedCollector(
        "callshield_leg_role",
        "role",
        "leg roles stated for a plain SIP fork (one per m-line), by origin and role",
        "leg-role statements ignored, by origin and reason (malformed, unknown, "
        "count_mismatch, siprec, overridden, no_such_leg, not_plain_sip)",
        snapshot,
    )
