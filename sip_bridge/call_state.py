"""Whether a monitored call is answered yet, as the PBX says it (issue 10: early media).

A PBX that forks a call to the bridge before it is answered (ringback, announcements,
an IVR the caller talks to before an agent answers) says so, and later says that it
was answered; until then the call's windows are scored and published but never alert,
and after it windows starting before the answer point still never count (the runtime's
``mark_early_media``/``answered``, fed by :class:`sip_bridge.calls.Call`'s
``early_media``). A call that says nothing has no early phase.

Where it is said (each an *origin*, counted apart):

- ``sip_header``: a header on the INVITE (``call_state_header``, default
  ``X-CallShield-Call-State``), then the same header on an in-dialog re-INVITE, UPDATE
  or INFO to say ``answered``;
- ``api``: the control API's ``call_state`` (create, PATCH) and
  ``PUT /v1/calls/{id}/call-state`` (any live call, also by an external id);
- ``twilio_parameter``: ``<Parameter name="call_state" value="early"/>`` on a Twilio
  ``<Stream>`` (a stream started before ``<Dial>``: the caller in an IVR);
- ``audio_fork_metadata``: ``call_state`` in the mod_audio_fork / jambonz metadata;
- ``siprec_metadata``: the SIPREC metadata's ``callstate`` extension (at the start and in
  any update; ``sip_bridge.sip.siprec``: its early words say early, any other text says
  answered, so it is counted as one of the two, never ``unknown``);
- ``sip_dialog``: the bridge's own early dialog. With ``Require: 100rel`` and a delayed
  answer (``answer_delay``) the call starts at the reliable 180, whose SDP lets media
  flow before our 200: a call whose INVITE says nothing (no ``sip_header``) is early
  from then until our 200, which says answered. Said by the UAS, never refused.

Adapters say only the state at the start; ``answered`` then comes through the control
API by the platform's id (``by-external-id/twilio/<CallSid>``).

Values, trimmed and case-insensitive: ``early`` and the SIPREC extension's early words
(``alerting``, ``ringing``, ``progress``, ``proceeding``), Asterisk's ``ring``; and
``answered``, ``answer``, ``up`` (Asterisk's ``${CHANNEL(state)}``), ``connected``,
``confirmed``, ``active``. Anything else is refused: counted by origin and reason
(``malformed``: not a word of letters, ``-`` and ``_`` up to 32 characters;
``unknown``: a word not listed; ``conflicting``: two different states at once;
``after_answer``: ``early`` for a call that is already answered, which cannot go back)
and ignored, the call going on as if nothing had been said. SIP never refuses a call
or an update for it; the control API answers 422 (409 for ``after_answer``).

Counting: only what is new counts. A state counts when the call's state, or the origin
saying it, changes (``taken``); a statement that repeats exactly the same origin's last
one on that call with the same outcome (an RFC 4028 session refresh re-sends the
INVITE's headers every few minutes, a SIPREC SRC its metadata) counts nothing, a refusal
included: a repeated identical refusal counts once per call
(``sip_bridge.stated_counts.restated``). The control API's refusals, each answered
422/409, count per request.

``P-Early-Media`` (RFC 5009) is not read as a call state: it authorises early media
between trusted network elements (in an INVITE it can only say ``supported``; the
direction parameters belong to the 18x/2xx and later requests of *that* dialog's
gating), so its presence or absence says nothing about whether the forked call was
answered; the UAS counts it seen (``p_early_media_ignored``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from sip_bridge.sip.siprec import EARLY_STATES
from sip_bridge.stated_counts import Snapshot, StatedCollector, shown

log = logging.getLogger(__name__)

EARLY_WORDS: Final = EARLY_STATES | {"ring"}
ANSWERED_WORDS: Final = frozenset({"answered", "answer", "up", "connected", "confirmed", "active"})
WORD_RE: Final = re.compile(r"^[a-z_-]{1,32}$")
Origin = Literal[
    "sip_header", "api", "twilio_parameter", "audio_fork_metadata", "siprec_metadata", "sip_dialog"
]
State = Literal["early", "answered"]
Reason = Literal["malformed", "unknown", "conflicting", "after_answer"]


@dataclass(frozen=True, slots=True)
class StateHint:
    """What one origin said about the call's state (every value it sent)."""

    origin: Origin
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A hint read: the state it says (None: nothing said, or refused) or why refused."""

    state: State | None = None
    reason: Reason | None = None


def hint_of(origin: Origin, value: object) -> StateHint | None:
    """An adapter's value (a JSON field) as a hint; None when absent or empty. A value
    that is not a string stands in as its type name, so it is refused as malformed."""
    if value is None or value == "":
        return None
    return StateHint(origin, (value if isinstance(value, str) else f"<{type(value).__name__}>",))


def read_state(values: Iterable[str]) -> Verdict:
    """The state ``values`` say, pure (no counting): empty or absent says nothing."""
    said = {v.strip().lower() for v in values if v.strip()}
    if not said:
        return Verdict()
    if any(not WORD_RE.fullmatch(v) for v in said):
        return Verdict(reason="malformed")
    states: set[State] = set()
    for v in said:
        if v in EARLY_WORDS:
            states.add("early")
        elif v in ANSWERED_WORDS:
            states.add("answered")
        else:
            return Verdict(reason="unknown")
    if len(states) > 1:
        return Verdict(reason="conflicting")
    return Verdict(state=states.pop())


def judge(hint: StateHint | None, *, early_now: bool, starting: bool) -> Verdict:
    """``hint`` for a call that is early now (or not) and starting (or live): ``early``
    is only taken at the start or while the call is still early."""
    if hint is None:
        return Verdict()
    verdict = read_state(hint.values)
    if verdict.state == "early" and not starting and not early_now:
        return Verdict(reason="after_answer")
    return verdict


def taken(verdict: Verdict, origin: Origin, held: tuple[State, Origin] | None) -> Verdict:
    """``verdict`` as counted, pure: a state the call already has (``held``: the state
    taken last and who said it) from that origin is a restatement, not taken again
    (nothing said); a change or a refusal is left as it is."""
    if verdict.state is not None and (verdict.state, origin) == held:
        return Verdict()
    return verdict


@dataclass
class CallStates:
    """Counts what every origin said (``stats``, for /metrics); thread-safe."""

    stats: Counter[tuple[str, ...]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, hint: StateHint, verdict: Verdict, call_id: str = "") -> None:
        """Record a judged hint: its state taken, or its refusal (logged, shortened)."""
        with self._lock:
            if verdict.reason is not None:
                self.stats["rejected", hint.origin, verdict.reason] += 1
            elif verdict.state is not None:
                self.stats["said", hint.origin, verdict.state] += 1
        if verdict.reason is not None:
            log.warning(
                "call %s: call state from %s ignored (%s): %s",
                call_id or "-",
                hint.origin,
                verdict.reason,
                shown(hint.values, "|", 24),
            )

    def snapshot(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            return dict(self.stats)


def call_state_collector(snapshot: Snapshot) -> StatedCollector:
    """``callshield_call_state_total{origin,state}`` (states taken) and
    ``callshield_call_state_rejected_total{origin,reason}`` (values ignored)."""
    return StatedCollector(
        "callshield_call_state",
        "state",
        "call states taken (early media until answered), by origin and state",
        "call-state values ignored, by origin and reason (malformed, unknown, "
        "conflicting, after_answer)",
        snapshot,
    )
