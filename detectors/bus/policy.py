"""The alert policy as data (DESIGN §5, issue 10): pure pydantic, so the dashboard can
validate what an admin proposes and the bridge can compile what Redis holds.

Per dimension a ``DimensionPolicy``: the threshold, the minimum net speech a window needs
to count, N-of-M windows, the cap on alerts per call and the action band (scores at or
above ``high_threshold`` are ``high``, others ``elevated``, never above ``max_band``).
Scopes, most specific first, resolved per dimension::

    tenants[t].queues[q]  ->  tenants[t].dnis[d]  ->  tenants[t]  ->  dimensions  ->  default

A scope that does not name a dimension leaves it to the next one; the top-level
``dimensions`` table is laid over the built-in one (a policy that names only
synthetic_voice still keeps speech_activity from alerting). Early media never
alerts: ``early_media_alerts`` exists so that a policy saying otherwise is refused.

``version`` is ``<counter>-<hash>``: the counter Redis hands out when the policy is
stored (0 for the built-in one) and the first 12 hex digits of the SHA-256 of the
policy's content (everything but the version), so two nodes showing the same version
run the same rules.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from detectors.alert_schema import Band, Dimension

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"  # as watchlists' tenants
SCOPE_PATTERN = r"^[A-Za-z0-9+][A-Za-z0-9_.:+-]{0,63}$"  # a queue name or a DNIS
MAX_M = 100
MAX_SCOPES = 1000
VERSION_PATTERN = r"^[0-9]+-[0-9a-f]{12}$"

TenantName = Annotated[str, Field(pattern=TENANT_PATTERN)]
ScopeName = Annotated[str, Field(pattern=SCOPE_PATTERN)]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DimensionPolicy(_Data):
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    high_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    release: float | None = Field(default=None, ge=0.0, le=1.0)  # default threshold - 0.1
    n: int = Field(default=2, ge=1, le=MAX_M)
    m: int = Field(default=3, ge=1, le=MAX_M)
    min_net_speech_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    max_alerts_per_call: int = Field(default=3, ge=0, le=1000)
    max_band: Band = Band.HIGH
    revise_step: float = Field(default=0.05, gt=0.0, le=1.0)
    alerting: bool = True
    # a window scoring this far (a share of the headroom) from ``threshold`` to 1.0
    # opens the episode on its own, without the N-of-M rule's other windows (issue 5:
    # a short utterance holds one window of evidence; None: N-of-M only)
    single_window: float | None = Field(default=None, gt=0.0, lt=1.0)
    # ... and only a window holding at least this much net speech (a mostly silent
    # window's score is weak evidence)
    single_window_min_net_speech_s: float = Field(default=2.0, ge=0.0, le=3600.0)

    @model_validator(mode="after")
    def _consistent(self) -> DimensionPolicy:
        if self.n > self.m:
            raise ValueError(f"n ({self.n}) must not exceed m ({self.m})")
        if self.release is not None and self.release > self.threshold:
            raise ValueError(
                f"release ({self.release}) must not exceed threshold ({self.threshold})"
            )
        if self.max_band is Band.LOW and self.alerting:
            raise ValueError("max_band low on an alerting dimension: set alerting false")
        return self

    @property
    def release_threshold(self) -> float:
        return self.release if self.release is not None else max(0.0, self.threshold - 0.1)

    @property
    def single_window_threshold(self) -> float | None:
        """The score at which one window opens the episode alone (None: never)."""
        if self.single_window is None:
            return None
        return self.threshold + self.single_window * (1.0 - self.threshold)

    def opens(self, windows: Iterable[tuple[float, float]]) -> bool:
        """Whether the last M counted windows, (score, net speech s) each, open an
        episode: N of them at the threshold, or one at the single-window bar with at
        least ``single_window_min_net_speech_s`` of speech."""
        bar = self.single_window_threshold
        least = self.single_window_min_net_speech_s
        hits = alone = 0
        for score, speech in windows:
            hits += score >= self.threshold
            alone += bar is not None and score >= bar and speech >= least
        return hits >= self.n or alone > 0

    def used(self) -> dict[str, float]:
        """The numbers behind an alert (``Alert.thresholds``)."""
        bar = self.single_window_threshold
        return {
            "threshold": self.threshold,
            "high": self.high_threshold,
            "release": self.release_threshold,
            "n": float(self.n),
            "m": float(self.m),
            "min_net_speech_s": self.min_net_speech_s,
            "max_alerts_per_call": float(self.max_alerts_per_call),
        } | (
            {}
            if bar is None
            else {
                "single_window": bar,
                "single_window_min_net_speech_s": self.single_window_min_net_speech_s,
            }
        )


DimensionRules = Annotated[dict[Dimension, DimensionPolicy], Field(max_length=len(Dimension))]


class ScopePolicy(_Data):
    dimensions: DimensionRules = Field(default_factory=dict)


class TenantPolicy(_Data):
    dimensions: DimensionRules = Field(default_factory=dict)
    queues: dict[ScopeName, ScopePolicy] = Field(default_factory=dict, max_length=MAX_SCOPES)
    dnis: dict[ScopeName, ScopePolicy] = Field(default_factory=dict, max_length=MAX_SCOPES)


def _builtin_dimensions() -> dict[Dimension, DimensionPolicy]:
    return {
        Dimension.VOICE_MISMATCH: DimensionPolicy(threshold=0.9, max_band=Band.ELEVATED),
        # each window's score is already the whole call's aggregate (speaker
        # biometrics): one window over the threshold is the call-level decision
        Dimension.KNOWN_FRAUDSTER: DimensionPolicy(n=1, m=1),
        Dimension.SPEECH_ACTIVITY: DimensionPolicy(alerting=False),
        # each dtmf_behaviour result already scores the call's key presses so far
        Dimension.DTMF_BEHAVIOUR: DimensionPolicy(n=1, m=1),
        # one verdict per call update (detectors.caller_id): a failed STIR/SHAKEN check
        # or a velocity count is the call-level decision; a dropped attestation alone
        # (0.7) stays elevated
        Dimension.CALLER_ID: DimensionPolicy(threshold=0.6, high_threshold=0.9, n=1, m=1),
    }


# The single-window bar a dimension gets when no scope names it and it runs at its
# model's calibrated threshold (``with_model_threshold``), unless the policy's
# ``default`` sets its own. synthetic_voice: a short suspicious utterance holds one
# 3 s window of evidence, and the N-of-M rule otherwise waits a hop for a second window
# half of silence (docs/alerts.md, "One window alone"; chosen on the session eval).
BUILTIN_SINGLE_WINDOW: dict[Dimension, float] = {Dimension.SYNTHETIC_VOICE: 0.65}


def with_model_threshold(
    pol: DimensionPolicy, threshold: float, dimension: Dimension | None = None
) -> DimensionPolicy:
    """``pol`` with a detector's calibrated threshold: ``high`` halfway from it to 1 (at
    least the policy's), release recomputed below it, and ``dimension``'s built-in
    single-window bar where ``pol`` sets none."""
    high = max(pol.high_threshold, round(threshold + (1.0 - threshold) / 2, 3))
    update: dict[str, Any] = {"threshold": threshold, "high_threshold": high, "release": None}
    if pol.single_window is None and dimension in BUILTIN_SINGLE_WINDOW:
        update["single_window"] = BUILTIN_SINGLE_WINDOW[dimension]
    return pol.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a call belongs: its tenant, queue and DNIS (``None``: not known)."""

    tenant: str = "default"
    queue: str | None = None
    dnis: str | None = None


class PolicyBody(_Data):
    """A policy's rules without its version: what an admin writes."""

    default: DimensionPolicy = DimensionPolicy()
    dimensions: DimensionRules = Field(default_factory=_builtin_dimensions)
    tenants: dict[TenantName, TenantPolicy] = Field(default_factory=dict, max_length=MAX_SCOPES)
    early_media_alerts: Literal[False] = False

    @model_validator(mode="before")
    @classmethod
    def _over_builtin(cls, data: Any) -> Any:
        """Dimensions a policy does not name keep their built-in rule (speech_activity
        gates, it does not alert), not the policy's ``default``."""
        if isinstance(data, dict) and isinstance(data.get("dimensions"), dict):
            data = {**data, "dimensions": {**_builtin_dimensions(), **data["dimensions"]}}
        return data

    def content_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"version"})
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def versioned(self, counter: int) -> Policy:
        data = self.model_dump(exclude={"version"})
        return Policy(version=f"{counter}-{self.content_hash()}", **data)

    def for_dimension(self, dimension: Dimension, scope: Scope | None = None) -> DimensionPolicy:
        """The rule for ``dimension`` in ``scope``: the most specific scope naming it."""
        if scope is not None:
            tenant = self.tenants.get(scope.tenant)
            if tenant is not None:
                for table, key in ((tenant.queues, scope.queue), (tenant.dnis, scope.dnis)):
                    if key is not None:
                        found = table.get(key)
                        if found is not None and dimension in found.dimensions:
                            return found.dimensions[dimension]
                if dimension in tenant.dimensions:
                    return tenant.dimensions[dimension]
        return self.dimensions.get(dimension, self.default)

    def effective(
        self, dimension: Dimension, scope: Scope | None, model_threshold: float | None
    ) -> DimensionPolicy:
        """The rule fusion runs: ``for_dimension``, except that a dimension no scope
        names takes its detector's calibrated threshold (``model_threshold``, from the
        model manifest) instead of the policy's generic ``default`` one."""
        rule = self.for_dimension(dimension, scope)
        if rule is self.default and model_threshold is not None and 0.0 < model_threshold < 1.0:
            return with_model_threshold(rule, model_threshold, dimension)
        return rule

    def resolve(self, scope: Scope | None = None) -> dict[Dimension, DimensionPolicy]:
        """Every dimension's rule in ``scope`` (what fusion keeps per call)."""
        return {d: self.for_dimension(d, scope) for d in Dimension}


class Policy(PolicyBody):
    """A policy as stored and run: its rules and its version."""

    version: str = ""

    @model_validator(mode="after")
    def _version(self) -> Policy:
        if not self.version:
            object.__setattr__(self, "version", f"0-{self.content_hash()}")
        return self

    def body(self) -> PolicyBody:
        return PolicyBody.model_validate(self.model_dump(exclude={"version"}))

    def check_version(self) -> None:
        """ValueError unless the version's hash is this content's (a stored policy)."""
        counter, _, digest = self.version.partition("-")
        if not counter.isdigit() or digest != self.content_hash():
            raise ValueError(f"policy version {self.version!r} does not match its content")
