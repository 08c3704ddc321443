"""The caller_id scoring rules: a neutral call-metadata record and the ANI's velocity
in, a score in [0, 1] and number-free reasons out.

- A failed STIR/SHAKEN verification (bad signature, orig.tn not the claimed number,
  stale iat, untrusted or mismatched certificate, malformed token) is forged or
  broken identity: ``FAILED`` (high).
- Attestation C, or no verified attestation at all, is common on honest calls (many
  carriers do not sign): alone it scores low, and only where this keyed ANI hash
  usually arrives verified with A or B (``attested_min`` such calls lately) is it
  ``DROPPED`` (elevated), never high.
- Velocity: the same ANI hash on ``concurrent`` live calls or ``recent`` calls within
  the window, cluster-wide: elevated at the configured counts, high at the
  ``*_high`` ones.

The score is the strongest of these; every rule that fired is a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Attestation = Literal["A", "B", "C"]
Outcome = Literal["verified", "failed", "unverified", "absent"]

FAILED: Final = 0.95
DROPPED: Final = 0.7  # attestation lower than this number usually gets: elevated only
ATTEST_C: Final = 0.3  # C on a number with no attested history: visible, below threshold
VELOCITY_ELEVATED: Final = 0.7
VELOCITY_HIGH: Final = 0.92


@dataclass(frozen=True, slots=True)
class CallMetadata:
    """What the signalling said about the caller, without the number.

    ``claims_number``: the call's origin names a calling number (False: anonymous or
    no signalling at all); ``ani_hash``: its keyed hash ("" when none)."""

    attestation: Attestation | None = None
    verification: Outcome = "absent"
    reason: str = ""
    claims_number: bool = False
    ani_hash: str = ""

    @property
    def informative(self) -> bool:
        """Whether there is any caller-ID evidence to score (else: abstain)."""
        return self.claims_number or self.verification != "absent"

    @property
    def verified_attested(self) -> bool:
        return self.verification == "verified" and self.attestation in ("A", "B")


@dataclass(frozen=True, slots=True)
class Velocity:
    """This ANI hash across the cluster, this call included."""

    concurrent: int = 0
    recent: int = 0
    attested_before: int = 0  # earlier calls verified with A or B attestation


@dataclass(frozen=True, slots=True)
class CallerIdConfig:
    concurrent: int = 5
    concurrent_high: int = 10
    recent: int = 20
    recent_high: int = 50
    recent_window_s: float = 600.0
    attested_min: int = 3
    attested_ttl_s: float = 30 * 86400.0
    live_ttl_s: float = 4 * 3600.0  # a live entry whose call never ended expires then

    def __post_init__(self) -> None:
        if not 1 <= self.concurrent <= self.concurrent_high:
            raise ValueError("caller_id: need 1 <= concurrent <= concurrent_high")
        if not 1 <= self.recent <= self.recent_high:
            raise ValueError("caller_id: need 1 <= recent <= recent_high")
        if self.recent_window_s <= 0 or self.live_ttl_s <= 0 or self.attested_ttl_s <= 0:
            raise ValueError("caller_id: windows and TTLs must be positive")


def judge(
    meta: CallMetadata, velocity: Velocity, config: CallerIdConfig
) -> tuple[float, tuple[str, ...]] | None:
    """(score, reasons), or None to abstain (no caller-ID information at all)."""
    if not meta.informative:
        return None
    parts: list[tuple[float, str]] = []
    if meta.verification == "failed":
        parts.append((FAILED, f"STIR/SHAKEN verification failed ({meta.reason or 'unknown'})"))
    elif not meta.verified_attested:
        what = (
            f"attestation {meta.attestation}"
            if meta.attestation and meta.verification == "verified"
            else f"no verified attestation ({meta.verification}"
            + (f": {meta.reason})" if meta.reason else ")")
        )
        if velocity.attested_before >= config.attested_min:
            parts.append(
                (
                    DROPPED,
                    f"{what} on a number that came verified A/B on "
                    f"{velocity.attested_before} recent calls",
                )
            )
        elif meta.attestation == "C" and meta.verification == "verified":
            parts.append((ATTEST_C, what))
    for count, elevated, high, label in (
        (velocity.concurrent, config.concurrent, config.concurrent_high, "concurrent calls"),
        (
            velocity.recent,
            config.recent,
            config.recent_high,
            f"calls in the last {config.recent_window_s:.0f} s",
        ),
    ):
        if count >= high:
            parts.append((VELOCITY_HIGH, f"same caller ID on {count} {label} (>= {high})"))
        elif count >= elevated:
            parts.append((VELOCITY_ELEVATED, f"same caller ID on {count} {label} (>= {elevated})"))
    if not parts:
        return 0.0, ()
    parts.sort(key=lambda p: -p[0])
    return parts[0][0], tuple(p[1] for p in parts)
