"""Fusion and policy: window results in, per-call risk, score updates and alerts out
(DESIGN §5).

Per call and dimension, the last M scored windows are kept. An *episode* opens when at
least N of them reach the dimension's threshold: one ``Alert`` (revision 1, a
deterministic id from the call, the dimension and the episode number) goes to the
publisher. While the episode is open, stronger evidence (a higher band, or a peak at
least ``revise_step`` higher) publishes a new revision of the same alert, never a new
alert. With ``single_window`` set, one window at that bar (above the threshold) opens
the episode on its own. The episode closes (hysteresis) when none of the last M windows
reaches the lower ``release`` threshold; a later episode is a new alert, up to the
per-call cap.
Scoring never stops: a voice that turns synthetic after the first minute opens an
episode then. Every window, scored or abstained, also goes out as a ``ScoreUpdate``.

The rules come from the alert policy (``detectors.bus.policy``), resolved once per call
for its scope (tenant, queue, DNIS) and again when the policy changes: ``set_policy``
is a reference swap (copy-on-write) that any thread may do without the runtime's lock;
each window reads the policy once, so it is scored under one version, which its alert
names (``policy_version`` and the ``thresholds`` used). A dimension no scope of the
policy names runs at its detector's own calibrated threshold (the model manifest's),
not at the policy's generic ``default``. Windows of early media (starting before
``mark_early_media``'s offset: ``inf`` while the call is not answered, then the answer's
offset) are scored and published but never count towards an alert, whatever the policy
says.

Not thread-safe otherwise: ``Fusion`` is called under the runtime's lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from detectors.alert_schema import (
    Alert,
    Band,
    CallState,
    Dimension,
    Reason,
    ScoreUpdate,
    alert_id_for,
)
from detectors.alert_schema import WindowQuality as WireQuality
from detectors.bus.policy import DimensionPolicy, Policy, Scope, with_model_threshold
from detectors.contract import WindowResult

_BAND_ORDER = {Band.LOW: 0, Band.ELEVATED: 1, Band.HIGH: 2}
# judged from signalling, not audio: early media does not hold their alerts back
SIGNAL_DIMENSIONS = frozenset({Dimension.CALLER_ID})


class AlertPublisher(Protocol):
    """Where alerts and score updates go (Redis, in the alerts issue). Must not block."""

    def publish_alert(self, alert: Alert) -> None: ...

    def publish_score(self, update: ScoreUpdate) -> None: ...


@dataclass(slots=True)
class _Episode:
    number: int
    revision: int
    band: Band
    peak: float
    created_at: datetime
    evidence: deque[Reason] = field(default_factory=lambda: deque(maxlen=5))


@dataclass(slots=True)
class _DimState:
    # (start_s, end_s, score, the window's own reasons, net speech s) of scored windows
    recent: deque[tuple[float, float, float, tuple[str, ...], float]]
    episodes: int = 0
    open: _Episode | None = None
    last_score: float = 0.0


@dataclass(slots=True)
class _Call:
    call_id: str
    call_key: str  # correlation id where known: one alert across duplicate recordings
    scope: Scope = field(default_factory=Scope)
    dims: dict[Dimension, _DimState] = field(default_factory=dict)
    model_versions: dict[str, str] = field(default_factory=dict)
    provider: str = ""
    rules: dict[Dimension, DimensionPolicy] = field(default_factory=dict)
    rules_of: Policy | None = None  # the policy ``rules`` were resolved from
    early_until_s: float = 0.0  # windows starting before then are early media

    def rules_for(self, policy: Policy) -> dict[Dimension, DimensionPolicy]:
        if self.rules_of is not policy:
            self.rules, self.rules_of = policy.resolve(self.scope), policy
        return self.rules


@dataclass(frozen=True, slots=True)
class CallRisk:
    band: Band
    score: float
    reasons: tuple[Reason, ...]


class Fusion:
    def __init__(
        self,
        publisher: AlertPublisher,
        policy: Policy | None = None,
        node_id: str = "node",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_alert: Callable[[Alert, WindowResult | None], None] | None = None,
    ) -> None:
        self.publisher, self.policy, self.node_id = publisher, policy or Policy(), node_id
        self._now = now
        self._on_alert = on_alert
        self._calls: dict[str, _Call] = {}

    def set_policy(self, policy: Policy) -> None:
        """Hot reload (any thread): open episodes keep their ids; the next window of
        every call uses the new rules."""
        self.policy = policy

    def open_call(
        self, call_id: str, correlation_id: str | None = None, scope: Scope | None = None
    ) -> None:
        self._calls.setdefault(call_id, _Call(call_id, correlation_id or call_id, scope or Scope()))

    def set_scope(self, call_id: str, scope: Scope) -> None:
        """The call's tenant, queue or DNIS became known or changed."""
        call = self._calls.get(call_id)
        if call is not None and call.scope != scope:
            call.scope, call.rules_of = scope, None

    def set_queue(self, call_id: str, queue: str) -> bool:
        """A queue claimed mid-call (issue 12): the call's windows from the next one on
        are scored under that queue's rules (its alerts name them). False: no such call."""
        call = self._calls.get(call_id)
        if call is None:
            return False
        self.set_scope(call_id, Scope(call.scope.tenant, queue, call.scope.dnis))
        return True

    def mark_early_media(self, call_id: str, until_s: float) -> None:
        """Audio before ``until_s`` (seconds of the call's legs) is early media: ``inf``
        while the call is not answered, then the answer's offset (the latest mark wins)."""
        call = self._calls.get(call_id)
        if call is not None:
            call.early_until_s = until_s

    def on_result(self, result: WindowResult) -> None:
        call = self._calls.get(result.key.call_id)
        if call is None:
            return  # the call ended while the window was in flight
        call.model_versions[result.detector] = result.model_version
        call.provider = call.provider or result.provider
        self.publisher.publish_score(_score_update(result))
        if result.score is None or (
            result.key.start_s < call.early_until_s and result.dimension not in SIGNAL_DIMENSIONS
        ):
            return
        pol = call.rules_for(self.policy)[result.dimension]
        if pol is self.policy.default and 0.0 < result.threshold < 1.0:
            # no scope names this dimension: the model's own calibrated threshold (its
            # manifest, chosen on held-out data) beats the policy's generic default
            pol = call.rules[result.dimension] = with_model_threshold(
                pol, result.threshold, result.dimension
            )
        if result.quality.net_speech_s < pol.min_net_speech_s:
            return
        st = call.dims.get(result.dimension)
        if st is None or st.recent.maxlen != pol.m:
            st = call.dims[result.dimension] = _DimState(
                deque(st.recent if st else (), maxlen=pol.m),
                st.episodes if st else 0,
                st.open if st else None,
            )
        st.recent.append(
            (
                result.key.start_s,
                result.key.end_s,
                result.score,
                result.reasons,
                result.quality.net_speech_s,
            )
        )
        st.last_score = result.score
        if pol.alerting:
            self._step(call, result, st, pol)

    def _step(self, call: _Call, r: WindowResult, st: _DimState, pol: DimensionPolicy) -> None:
        ep = st.open
        if ep is None:
            if st.episodes >= pol.max_alerts_per_call or not pol.opens(
                (w[2], w[4]) for w in st.recent
            ):
                return
            hits = [w for w in st.recent if w[2] >= pol.threshold]
            peak = max(w[2] for w in hits)
            ep = st.open = _Episode(st.episodes, 1, _band(peak, pol), peak, self._now())
            st.episodes += 1
            for s, e, score, notes, _ in hits:
                ep.evidence.append(_reason(r.dimension, s, e, score, r.detector, pol, notes))
            self._publish(call, r.dimension, ep, pol, r)
            return
        if r.score is not None and r.score >= pol.threshold:
            ep.evidence.append(
                _reason(
                    r.dimension, r.key.start_s, r.key.end_s, r.score, r.detector, pol, r.reasons
                )
            )
            band = _band(r.score, pol)
            if _BAND_ORDER[band] > _BAND_ORDER[ep.band] or r.score >= ep.peak + pol.revise_step:
                ep.band = max(band, ep.band, key=_BAND_ORDER.__getitem__)
                ep.peak = max(ep.peak, r.score)
                ep.revision += 1
                self._publish(call, r.dimension, ep, pol, r)
        if len(st.recent) == st.recent.maxlen and all(
            w[2] < pol.release_threshold for w in st.recent
        ):
            st.open = None  # the episode is over; a new one will be a new alert

    def _publish(
        self,
        call: _Call,
        dimension: Dimension,
        ep: _Episode,
        pol: DimensionPolicy,
        trigger: WindowResult | None,
        state: CallState = CallState.LIVE,
    ) -> None:
        alert = Alert(
            alert_id=alert_id_for(call.call_key, dimension, ep.number),
            revision=ep.revision,
            call_id=call.call_id,
            correlation_id=None if call.call_key == call.call_id else call.call_key,
            node_id=self.node_id,
            dimension=dimension,
            band=ep.band,
            score=ep.peak,
            threshold=pol.threshold,
            episode=ep.number,
            reasons=tuple(ep.evidence),
            call_state=state,
            created_at=ep.created_at,
            updated_at=self._now(),
            tenant=call.scope.tenant,
            policy_version=call.rules_of.version if call.rules_of else self.policy.version,
            model_versions=dict(call.model_versions),
            provider=call.provider or "unknown",
            thresholds=pol.used(),
        )
        self.publisher.publish_alert(alert)
        if self._on_alert is not None:
            self._on_alert(alert, trigger)

    def end_call(self, call_id: str) -> None:
        """Close the call: open alerts get a final revision with call_state ended."""
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        rules = call.rules_for(self.policy)
        for dim, st in call.dims.items():
            if st.open is not None:
                st.open.revision += 1
                pol = rules[dim]
                self._publish(call, dim, st.open, pol, None, CallState.ENDED)

    def risk(self, call_id: str) -> CallRisk:
        """The call's risk now: the worst dimension over its recent windows."""
        call = self._calls.get(call_id)
        best = CallRisk(Band.LOW, 0.0, ())
        if call is None:
            return best
        rules = call.rules_for(self.policy)
        for dim, st in call.dims.items():
            pol = rules[dim]
            if not pol.alerting or not st.recent:
                continue
            score = sum(w[2] for w in st.recent) / len(st.recent)
            band = _band(score, pol) if score >= pol.threshold else Band.LOW
            if st.open is not None:
                band = max(band, st.open.band, key=_BAND_ORDER.__getitem__)
            if (_BAND_ORDER[band], score) > (_BAND_ORDER[best.band], best.score):
                reasons = tuple(st.open.evidence) if st.open else ()
                best = CallRisk(band, score, reasons)
        return best


def _band(score: float, pol: DimensionPolicy) -> Band:
    band = Band.HIGH if score >= pol.high_threshold else Band.ELEVATED
    return min(band, pol.max_band, key=_BAND_ORDER.__getitem__)


def _reason(
    dim: Dimension,
    start: float,
    end: float,
    score: float,
    detector: str,
    pol: DimensionPolicy,
    notes: tuple[str, ...] = (),
) -> Reason:
    """``notes``: the window's own reasons (e.g. the matched watchlist entry's id)."""
    where = "from call signalling" if dim in SIGNAL_DIMENSIONS else f"over {start:.1f}-{end:.1f} s"
    detail = f"{detector}: {score:.2f} >= {pol.threshold:.2f} {where}"
    if notes:
        detail += "; " + "; ".join(notes)
    return Reason(dimension=dim, start_s=start, end_s=end, score=score, detail=detail)


def _score_update(r: WindowResult) -> ScoreUpdate:
    q = r.quality
    return ScoreUpdate(
        call_id=r.key.call_id,
        leg_id=r.key.leg_id,
        dimension=r.dimension,
        window_start_s=r.key.start_s,
        window_end_s=r.key.end_s,
        score=r.score,
        abstained=r.abstained,
        quality=WireQuality(
            concealed_ratio=min(1.0, q.concealed_ratio),
            late_packets=q.late_packets,
            jitter_ms=q.jitter_ms,
            net_speech_s=max(0.0, q.net_speech_s),
        ),
        model_version=r.model_version,
        provider=r.provider,
    )


__all__ = ["AlertPublisher", "CallRisk", "DimensionPolicy", "Fusion", "Policy", "Scope"]
