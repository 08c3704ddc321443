"""Composition of the media process's analysis side: detector models, the detector
runtime, the Redis bus (``REDIS_URL`` or the embedded, supervised ``redis-server``),
the publisher with its outbox, and the HTTP status port. ``Bridge`` calls
:meth:`Wiring.attach` with its ingest, then :meth:`Wiring.start` before it answers SIP
and :meth:`Wiring.close` after it drained.

Models come from the models directory (``CALLSHIELD_MODELS_DIR``, ``--models-dir``),
verified by sha256. Fixture models there (``fixture: true``) are runtime test fixtures
with random weights: never loaded as detectors, except that ``--dev-fixture-models``
builds them in memory for demos and tests, and says so in the log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from detectors.admission import AdmissionConfig, OverloadPolicy
from detectors.alert_schema import Dimension
from detectors.bus.call_updates import CallUpdates, ClaimTarget
from detectors.bus.connect import resolve_url, sync_client
from detectors.bus.coverage_objective import CoverageRule, CoverageTracker, Objective
from detectors.bus.embedded import EmbeddedRedis, Supervisor
from detectors.bus.evidence import EvidenceMode, EvidenceSettings, load_evidence_vault
from detectors.bus.evidence_store import EvidenceWriter
from detectors.bus.keys import Keys
from detectors.bus.liveness import NodeLiveness
from detectors.bus.numbers import load_vault
from detectors.bus.policy_watch import PolicyWatcher
from detectors.bus.publisher import AlertPublisher
from detectors.bus.settings import BusSettings
from detectors.contract import Detector
from detectors.echo import EchoGate
from detectors.metrics import DetectorMetrics, render
from detectors.model_store import Installed, ModelSettings, ModelStore
from detectors.replay.detector import ReplayFingerprinter
from detectors.replay.service import ReplayService, build_replay
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scope_claims import ScopeClaims
from detectors.speaker.settings import BiometricsSettings
from detectors.stages import chain
from detectors.vad.gate import VadGate, gate_from_store
from detectors.vad.install import NAME as VAD_NAME
from native.ingest import Ingest
from sip_bridge.analysis import Analysis, BusPublisher, EnrichingPublisher
from sip_bridge.biometrics import Biometrics, build_biometrics, mode_gate, speaker_manifest
from sip_bridge.caller_id import CallerIdCollector, build_caller_id
from sip_bridge.coverage import WindowTally
from sip_bridge.coverage_metrics import CoverageCollector
from sip_bridge.detector_lanes import DetectorConcurrency, log_lanes
from sip_bridge.dtmf_tap import DtmfTap
from sip_bridge.evidence import EvidenceRecorder
from sip_bridge.gc_discipline import Frozen, freeze_after_warm_up, thaw
from sip_bridge.http import StatusServer
from sip_bridge.node_status import LatencyWindow, node_status
from sip_bridge.settings import Settings, split_host_port

log = logging.getLogger(__name__)


DETECTOR_MODELS_SETTING = "CALLSHIELD_DETECTOR_MODELS"


def select_models(installed: Mapping[str, Dimension], wanted: str = "") -> list[str]:
    """The names of the installed detector models to load (sorted): ``wanted`` (the
    comma-separated CALLSHIELD_DETECTOR_MODELS), or every one when it is empty.

    One model per scored dimension: fusion keeps one rule (the first model's calibrated
    threshold) and one N-of-M window state per call and dimension, so two models of one
    dimension would silently be scored against one threshold. Raises ValueError when a
    wanted name is not installed or when two selected models share a dimension."""
    names = sorted({n.strip() for n in wanted.split(",") if n.strip()})
    unknown = [n for n in names if n not in installed]
    if unknown:
        raise ValueError(
            f"{DETECTOR_MODELS_SETTING} names {', '.join(unknown)}, not an installed "
            f"detector model (installed: {', '.join(sorted(installed)) or 'none'})"
        )
    chosen = names or sorted(installed)
    by_dimension: dict[Dimension, list[str]] = {}
    for name in chosen:
        by_dimension.setdefault(installed[name], []).append(name)
    clashes = {dim: ns for dim, ns in by_dimension.items() if len(ns) > 1}
    if clashes:
        what = "; ".join(f"{dim.value}: {', '.join(ns)}" for dim, ns in sorted(clashes.items()))
        raise ValueError(
            f"more than one detector model for one dimension ({what}): fusion scores one "
            f"model per dimension (one threshold, one N-of-M window per call), so they "
            f"cannot run side by side; set {DETECTOR_MODELS_SETTING} to the models to load, "
            f"one per dimension (e.g. {DETECTOR_MODELS_SETTING}="
            f"{','.join(ns[0] for ns in by_dimension.values())}), or remove the others "
            f"from the models directory"
        )
    return chosen


def load_detectors(
    models: ModelSettings, dev_fixtures: str = "", intra_op_threads: int = 1
) -> list[Detector]:
    """The installed models (fixtures skipped; ``models.detector_models`` picks them, one
    per dimension, see ``select_models``) plus, with ``dev_fixtures`` ("tiny" or "full"),
    the fixture models built in memory; each session on ``intra_op_threads``."""
    from detectors.onnx_detector import OnnxDetector

    store = ModelStore(models.models_dir)
    found_by_name: dict[str, Installed] = {}
    for name in sorted({i.manifest.name for i in store.installed()}):
        try:
            found = store.get(name)
        except (LookupError, ValueError) as exc:
            log.error("model %s not loaded: %s", name, exc)
            continue
        if name == VAD_NAME:
            continue  # stateful: the VAD gate of the frame bank (Wiring), not a detector
        if found.manifest.fixture:
            log.warning(
                "model %s in %s is a runtime test fixture, not a detector: not loaded "
                "(--dev-fixture-models builds fixtures for demos and tests)",
                found.manifest.key,
                models.models_dir,
            )
            continue
        found_by_name[name] = found
    chosen = select_models(
        {name: f.manifest.dimension for name, f in found_by_name.items()}, models.detector_models
    )
    for name in sorted(set(found_by_name) - set(chosen)):
        log.info("model %s installed but not in %s: not loaded", name, DETECTOR_MODELS_SETTING)
    detectors: list[Detector] = [
        OnnxDetector(
            found_by_name[n].manifest,
            found_by_name[n].model_path,
            intra_op_threads=intra_op_threads,
        )
        for n in chosen
    ]
    if not detectors:
        log.warning(
            "no detector models installed in %s: calls are answered and their media and "
            "coverage recorded, but nothing is scored (install models with `callshield "
            "models install`)",
            models.models_dir,
        )
    if dev_fixtures:
        from detectors.fixture_models import all_fixtures

        for data, manifest in all_fixtures(tiny=dev_fixtures == "tiny"):
            detectors.append(OnnxDetector(manifest, data, intra_op_threads=intra_op_threads))
        log.warning(
            "--dev-fixture-models: loaded %s fixture models (random weights; the "
            "synthetic-voice fixture scores a 3.5 kHz marker tone). NOT detectors: for "
            "demos and tests only",
            dev_fixtures,
        )
    for d in detectors:
        s = d.spec
        log.info(
            "detector %s %s (%s) on %s: %d Hz, window %.2f s, hop %.2f s",
            s.name,
            s.version,
            s.dimension.value,
            d.provider,
            s.sample_rate,
            s.window_s,
            s.hop_s,
        )
    return detectors


class Wiring:
    def __init__(
        self,
        settings: Settings,
        bus_settings: BusSettings | None = None,
        models: ModelSettings | None = None,
        detectors: list[Detector] | None = None,
        biometrics: BiometricsSettings | None = None,
        evidence: EvidenceSettings | None = None,
    ) -> None:
        self.settings = settings
        self.bus_settings = bus_settings or BusSettings()
        self.detector_metrics = DetectorMetrics()
        models = models or ModelSettings()
        concurrency = DetectorConcurrency.from_settings(settings)
        if detectors is None:
            detectors = load_detectors(
                models, settings.dev_fixture_models, concurrency.intra_op_threads
            )
            if settings.replay_detection:
                detectors.append(ReplayFingerprinter())  # numpy, no model file
        self.detectors = detectors
        self.client, self.supervisor = self._connect()
        self.biometrics: Biometrics | None = build_biometrics(
            detectors,
            models.models_dir,
            self.client,
            Keys(self.bus_settings.key_prefix),
            biometrics,
        )
        self.replay: ReplayService | None = build_replay(
            detectors, self.client, Keys(self.bus_settings.key_prefix), self.bus_settings.node_id
        )
        self.bus = AlertPublisher(self.client, self.bus_settings)
        # heartbeat of this process, and the reaper of lost nodes' calls
        self.liveness = NodeLiveness(
            self.client,
            self.bus_settings,
            self.bus.boot,
            status=lambda: node_status(self, self.bus_settings.node_id, self.bus.boot),
        )
        # the bridge points this at its controller's drain flag (the status summary)
        self.draining: Callable[[], bool] = lambda: False
        self.latency = LatencyWindow()  # the status summary's recent model latency
        self.enricher = EnrichingPublisher(self.bus)
        self.windows = WindowTally()
        bs = self.bus_settings
        self.coverage = CoverageTracker(
            {d.spec.dimension for d in detectors},
            bs.node_id,
            CoverageRule.from_settings(bs),
            Objective.from_settings(bs),
        )
        longest = max((d.spec.window_s for d in detectors), default=1.0)
        max_calls = settings.max_analysed_calls
        self.runtime = DetectorRuntime(
            detectors,
            self.enricher,
            config=RuntimeConfig(
                workers=concurrency.workers,
                lanes=concurrency.lane(),
                max_legs=max(1, 2 * max_calls),
                ring_s=2 * longest + 2.0,
                admission=AdmissionConfig(
                    max_calls=max_calls,
                    policy=OverloadPolicy.SHED,
                    seed_margin=settings.admission_seed_margin,
                ),
                node_id=self.bus_settings.node_id,
            ),
            metrics=self.detector_metrics,
            on_result=self.windows.on_result,
            stage=chain(
                [
                    self.replay.stage if self.replay else None,
                    self.biometrics.stage if self.biometrics else mode_gate(detectors, biometrics),
                ]
            ),
        )
        log_lanes(self.runtime, detectors)
        # caller_id: judged from signalling (no model), into the same fusion
        self.caller_id = build_caller_id(
            self.runtime, self.client, Keys(self.bus_settings.key_prefix)
        )
        self.echo = EchoGate(max_legs=max(1, 2 * max_calls)) if settings.echo_gate else None
        self.runtime.bank.echo = self.echo
        # Silero, where installed, decides the net speech of every window (too_little_speech)
        self.vad_gate: VadGate | None = gate_from_store(
            models.models_dir, max(1, 2 * max_calls), self.runtime.bank.ring_frames
        )
        self.runtime.bank.vad = self.vad_gate
        if self.vad_gate is not None:
            log.info("VAD gating: net speech per window from Silero and the energy gate")
        # the alert policy from Redis, swapped into fusion when an admin changes it
        self.policy_watch = PolicyWatcher(
            self.client, Keys(self.bus_settings.key_prefix), self.runtime.set_policy
        )
        # mid-call claims (PATCH /api/v1/calls/{id}): one consumer of the stream; the
        # claimed queue re-scopes the call's policy, the claimed account its biometrics
        claims: list[ClaimTarget] = [ScopeClaims(self.runtime)]
        if self.biometrics is not None:
            claims.append(self.biometrics.claims)
        self.call_updates = CallUpdates(self.client, Keys(self.bus_settings.key_prefix), claims)
        self.evidence = self._evidence(evidence or EvidenceSettings())
        self.analysis: Analysis | None = None
        self.http: StatusServer | None = None
        self._alive: Callable[[], bool] = lambda: False
        self._started = False
        self._supervising = False
        self._frozen: Frozen | None = None
        self._ping_at = 0.0
        self._ping_ok = False
        self._ping_lock = threading.Lock()

    # ---- the bus ----------------------------------------------------------------------

    def _connect(self) -> tuple[redis.Redis, Supervisor | None]:
        bs = self.bus_settings
        if not bs.embedded:
            return sync_client(bs, resolve_url(bs)), None
        embedded = EmbeddedRedis(bs)
        try:
            url = embedded.ensure()
        except (OSError, RuntimeError, TimeoutError) as exc:
            # never fail the calls for it: alerts wait in the outbox, the supervisor retries
            log.error("embedded redis-server did not start (%s); alerts wait in the outbox", exc)
            url = embedded.url
        return sync_client(bs, url), Supervisor(embedded)

    def _evidence(self, settings: EvidenceSettings) -> EvidenceRecorder | None:
        """The evidence recorder, when any tenant keeps evidence (issue 11)."""
        modes = {settings.mode, *settings.tenant_modes.values()}
        if modes == {EvidenceMode.OFF}:
            return None
        bs = self.bus_settings
        manifest = speaker_manifest(self.detectors)
        return EvidenceRecorder(
            settings,
            load_evidence_vault(settings, bs.state_dir),
            EvidenceWriter(self.client, Keys(bs.key_prefix), settings.receipt_grace_s),
            bs.node_id,
            self.biometrics.stage if self.biometrics is not None else None,
            manifest.key if manifest is not None else "",
        )

    # ---- lifecycle --------------------------------------------------------------------

    def attach(self, ingest: Ingest) -> Analysis:
        self.analysis = Analysis(
            self.runtime,
            self.bus,
            ingest,
            self.windows,
            self.coverage,
            load_vault(self.bus_settings),
            self.echo,
            self.replay.stage if self.replay else None,
            self.evidence,
            self.caller_id,
            dtmf=DtmfTap(ingest, max_legs=self.runtime.config.max_legs),
        )
        self.enricher.analysis = self.analysis
        self.detector_metrics.add_jitter_stats(self.analysis.jitter_sums)
        self.detector_metrics.registry.register(_BridgeCollector(self))
        self.detector_metrics.registry.register(CoverageCollector(self.coverage))
        self.detector_metrics.registry.register(CallerIdCollector(self.caller_id))
        return self.analysis

    def start(self, alive: Callable[[], bool]) -> None:
        """Blocking (run it off the event loop): bus threads, the HTTP port (answering
        503 on /ready meanwhile), then the models' pre-warm."""
        self._alive = alive
        self.bus.start()
        self.liveness.start()
        self.policy_watch.start()  # the stored policy before the first call
        self.call_updates.start()
        if self.biometrics is not None:
            self.biometrics.start()
        if self.replay is not None:
            self.replay.start()
        if self.evidence is not None:
            self.evidence.start()
        self.caller_id.start()
        if self.supervisor is not None:
            self.supervisor.start()
            self._supervising = True
        listen = self.settings.http_listen.strip()
        if listen:
            host, port = split_host_port(listen, 9464)
            self.http = StatusServer(host, port, self)
            self.http.start()
        t0 = time.monotonic()
        self.runtime.start()
        log.info(
            "%d detector models pre-warmed in %.1f s", len(self.detectors), time.monotonic() - t0
        )
        self._frozen = freeze_after_warm_up()  # DESIGN §3: no full GC pass over the models
        self._started = True

    def close(self) -> None:
        self._started = False
        if self._frozen is not None:
            thaw(self._frozen)
            self._frozen = None
        if self.http is not None:
            self.http.close()
        self.runtime.close()
        self.caller_id.close()
        if self.vad_gate is not None:
            self.vad_gate.close()
        self.policy_watch.close()
        self.call_updates.close()
        if self.biometrics is not None:
            self.biometrics.close()
        if self.replay is not None:
            self.replay.close()
        if self.evidence is not None:
            self.evidence.close()
        self.bus.close(timeout_s=5.0)
        self.liveness.close()  # after the ended events: what is left, the reaper ends
        if self.supervisor is not None and self._supervising:
            self.supervisor.stop()
        self.client.close()

    # ---- probes (HTTP thread) ---------------------------------------------------------

    def metrics(self) -> tuple[bytes, str]:
        return render(self.detector_metrics.registry)

    def ready(self) -> tuple[bool, dict[str, Any]]:
        checks = {
            "models_warm": bool(self.runtime.ready and self._started),
            "redis": self._redis_ok(),
            "outbox_writable": self._outbox_writable(),
        }
        ok = checks["models_warm"] and (checks["redis"] or checks["outbox_writable"])
        adm = self.runtime.admission
        capacity = {  # admission's estimate, seeded by the pre-warm timings (issue 5)
            "estimate": adm.capacity(),
            "seeded": adm.seeded_capacity(),
            "active": adm.active(),
            "remaining": adm.remaining(),
            "seed_margin": adm.config.seed_margin,  # CALLSHIELD_ADMISSION_SEED_MARGIN
        }
        details = {"checks": checks, "detectors": len(self.detectors), "capacity": capacity}
        return ok, details | {"policy_version": self.runtime.policy.version}

    def alive(self) -> tuple[bool, dict[str, Any]]:
        ticks = self.analysis.ticks if self.analysis is not None else 0
        return self._alive(), {"ticks": ticks}

    def _redis_ok(self) -> bool:
        with self._ping_lock:
            now = time.monotonic()
            if now - self._ping_at >= 1.0:
                self._ping_at = now
                try:
                    self._ping_ok = bool(self.client.ping())
                except redis.RedisError:
                    self._ping_ok = False
            return self._ping_ok

    def _outbox_writable(self) -> bool:
        path = self.bus_settings.outbox_path
        target = path if path.exists() else path.parent
        return target.exists() and os.access(target, os.W_OK)


class _BridgeCollector(Collector):
    """Publisher and playout figures at scrape time."""

    def __init__(self, wiring: Wiring) -> None:
        self._w = wiring

    def collect(self) -> Iterator[Any]:
        st = self._w.bus.stats
        a = self._w.analysis
        yield GaugeMetricFamily("callshield_redis_up", "1 while Redis acknowledges", st.redis_up)
        yield GaugeMetricFamily(
            "callshield_outbox_overflow", "1 while alerts hold the outbox", st.outbox_overflow
        )
        yield GaugeMetricFamily(
            "callshield_publish_pending", "entries not yet acknowledged", self._w.bus.pending
        )
        for name, value, text in (
            ("alerts_published", st.alerts_published, "Alert revisions Redis acknowledged"),
            ("scores_published", st.scores_published, "Score updates Redis acknowledged"),
            ("events_published", st.events_published, "Call events Redis acknowledged"),
            ("scores_dropped", st.scores_dropped, "Score updates and events dropped"),
            ("redis_errors", st.redis_errors, "Failed sends to Redis"),
            ("playout_ticks", a.ticks if a else 0, "Playout-clock ticks with legs"),
        ):
            yield CounterMetricFamily(f"callshield_{name}", text, value=value)
        yield GaugeMetricFamily(
            "callshield_calls_live", "Calls live on this bridge", a.live_calls if a else 0
        )
        pw, cu = self._w.policy_watch.stats, self._w.call_updates.stats
        info = GaugeMetricFamily(
            "callshield_policy_info",
            "The alert policy in force (1, by version)",
            labels=["version"],
        )
        info.add_metric([self._w.runtime.policy.version], 1)
        yield info
        for name, value, text in (
            ("policy_reloads", pw.reloads, "Alert policies swapped in from Redis"),
            ("policy_rejected", pw.rejected, "Stored alert policies refused (kept the old)"),
            ("call_updates_applied", cu.applied, "Mid-call claims applied to a call here"),
            ("call_updates_not_here", cu.not_here, "Mid-call claims for no call here, dropped"),
            ("call_updates_malformed", cu.malformed, "Mid-call claims that did not parse"),
        ):
            yield CounterMetricFamily(f"callshield_{name}", text, value=value)
        dt = a.dtmf.stats if a is not None and a.dtmf is not None else None
        if dt is not None:  # counts only, never a key (DESIGN §2)
            for name, value, text in (
                ("dtmf_rfc4733_keys", dt.rfc_events, "RFC 4733 key presses taken"),
                ("dtmf_inband_keys", dt.inband_keys, "In-band DTMF keys detected"),
                (
                    "dtmf_inband_duplicates",
                    dt.inband_deduplicated,
                    "In-band keys dropped (RFC 4733 sent too)",
                ),
                ("dtmf_results", dt.results, "dtmf_behaviour results to fusion"),
                ("dtmf_errors", dt.errors, "DTMF tap errors (no slot, stream gone)"),
            ):
                yield CounterMetricFamily(f"callshield_{name}", text, value=value)

    def describe(self) -> Iterator[Any]:
        return iter(())


__all__ = ["BusPublisher", "Wiring", "load_detectors", "select_models"]
