"""``callshield bridge``: the media process. SIP/SIPREC calls are answered by the UAS,
their RTP lands on native ingest streams (one per leg), a 20 ms playout clock pulls
every leg in one batch call and hands the frames to the detector runtime, and scores,
alerts and call events go to Redis (``sip_bridge.wiring``: models, runtime, bus,
/metrics and /ready). Without a ``wiring`` (unit tests) frames go to ``sink`` and
events to ``publisher``.

SIGTERM/SIGINT drain: plain SIP INVITEs and OPTIONS get 503 + Retry-After, SIPREC is
still answered (``unanalyzed:capacity``), live calls may finish until
``drain_timeout_s``; then the remaining ones get a BYE (reason ``drained``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from detectors.model_store import ModelSettings
from native.ingest import Ingest, dual_stack
from sip_bridge.adapter_metrics import AdapterCollector
from sip_bridge.adapters.audiosocket import AudioSocketServer
from sip_bridge.adapters.audiosocket_calls import AudioSocketCalls
from sip_bridge.api_app import build_api
from sip_bridge.api_server import ApiServer
from sip_bridge.bridge_metrics import IngestCollector, SipCollector, TenantCollector
from sip_bridge.call_state import call_state_collector
from sip_bridge.calls import CallController, CallPublisher, MemoryPublisher, call_now
from sip_bridge.leg_roles import leg_role_collector
from sip_bridge.media import FrameSink, MediaEngine
from sip_bridge.media_setup import bridge_ingest, bridge_media, receive_thread_note
from sip_bridge.settings import Settings
from sip_bridge.sinks import CountingSink
from sip_bridge.sip.passport import TrustStore
from sip_bridge.sip.transport import SipServer, TlsListener, server_context
from sip_bridge.sip.trust import PeerTrust
from sip_bridge.sip.uas import SipUas, UasConfig
from sip_bridge.tenant import TenantResolver
from sip_bridge.wiring import Wiring

log = logging.getLogger(__name__)


@dataclass
class Bridge:
    """Everything the media process wires together; ``serve`` runs it until stopped."""

    settings: Settings
    sink: FrameSink = field(default_factory=CountingSink)
    publisher: CallPublisher = field(default_factory=MemoryPublisher)
    wiring: Wiring | None = None
    ingest: Ingest = field(init=False)
    media: MediaEngine = field(init=False)
    controller: CallController = field(init=False)
    tenants: TenantResolver = field(init=False)
    uas: SipUas = field(init=False)
    server: SipServer = field(init=False)
    api: ApiServer | None = field(init=False, default=None)
    audiosocket: AudioSocketServer | None = field(init=False, default=None)
    ready: asyncio.Event = field(init=False)
    stop_requested: asyncio.Event = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        host, port = s.sip_address
        self.ingest = bridge_ingest(s)
        analysis = self.wiring.attach(self.ingest) if self.wiring is not None else None
        if analysis is not None:
            self.sink = self.publisher = analysis
        self.media = bridge_media(s, self.ingest, self.sink)
        self.tenants = TenantResolver(s.tenant_rules)
        self.controller = CallController(self.media, self.publisher, analysis, self.tenants)
        if self.wiring is not None:
            self.wiring.draining = lambda: self.controller.draining
        host4, host6 = s.sdp_addresses()
        if dual_stack(s.rtp_host or host) and None in (host4, host6):
            log.warning(
                "RTP is dual-stack but no %s address is known for SDP answers to %s "
                "offers: they get %s (set %s)",
                "IPv4" if host4 is None else "IPv6",
                "IN IP4" if host4 is None else "IN IP6",
                s.advertised_address or host,
                "CALLSHIELD_ADVERTISED_ADDRESS_IP4"
                if host4 is None
                else "CALLSHIELD_ADVERTISED_ADDRESS_IP6",
            )
        config = UasConfig(
            host=s.advertised_address or host,
            host4=host4 or "",
            host6=host6 or "",
            port=port,
            tls_port=s.sip_tls_address[1] if s.sip_tls_address else 0,
            answer_delay=s.answer_delay_s,
            retry_after=s.retry_after_s,
            max_dialogs_per_source=s.max_dialogs_per_source,
            reject_siprec_when_draining=s.reject_siprec_when_draining,
            rtp_timeout=s.rtp_timeout_s,
            trust_store=(
                TrustStore.load(s.stir_ca_dir, s.stir_cert_cache) if s.stir_ca_dir else None
            ),
            tenant_header=s.tenant_header,
            call_state_header=s.call_state_header,
            leg_roles_header=s.leg_roles_header,
            leg_role_labels=s.leg_role_labels,
        )
        self.uas = SipUas(self.controller, config)
        tls = None
        if s.sip_tls_address is not None and s.sip_tls_cert and s.sip_tls_key:
            context = server_context(s.sip_tls_cert, s.sip_tls_key, s.sip_tls_ca)
            tls = TlsListener(*s.sip_tls_address, context)
        trust = PeerTrust.parse(s.sip_trusted_peers)
        self.server = SipServer(self.uas, host, port, tls=tls, trust=trust)
        if s.audiosocket_address is not None:
            calls = AudioSocketCalls(self.controller, s.rtp_timeout_s)
            self.audiosocket = AudioSocketServer(calls, s)
        if s.api_address is not None:
            app = build_api(self.controller, s, audiosocket=self.audiosocket)
            self.api = ApiServer(app, *s.api_address)
        if self.wiring is not None:  # adapters', ingest's and SIP's counters on /metrics
            registry = self.wiring.detector_metrics.registry
            registry.register(AdapterCollector(self.adapter_stats))
            registry.register(IngestCollector(self.ingest_counters))
            registry.register(SipCollector(self.uas.stats))
            registry.register(TenantCollector(self.tenants.snapshot))
            registry.register(call_state_collector(self.controller.call_states.snapshot))
            registry.register(leg_role_collector(self.controller.leg_roles.snapshot))
        self.ready = asyncio.Event()
        self.stop_requested = asyncio.Event()

    def ingest_counters(self) -> dict[str, Any]:
        """The receiver's counters (``unmatched``: datagrams on the shared RTP port from
        no leg's source), the shared-port mode's own, and the playout clock's: ticks
        pulled over a frame late (caught up, never skipped) and ended calls' legs closed
        after their buffered audio played out."""
        media = self.media
        playout = {"playout_late_ticks": media.late_ticks, "drained_legs": media.drained_legs}
        return {**self.ingest.counters(), **media.counters(), **playout}

    def adapter_stats(self) -> list[tuple[str, dict[str, Any]]]:
        """(adapter, counters) of every ingress adapter this bridge runs."""
        out: list[tuple[str, dict[str, Any]]] = []
        if self.audiosocket is not None:
            out.append(("audiosocket", self.audiosocket.snapshot()))
        state = getattr(self.api.app, "state", None) if self.api is not None else None
        if state is not None:
            for name, stats in getattr(state, "adapter_stats", {}).items():
                out.append((name, stats.snapshot()))
            whip = getattr(state, "whip", None)
            if whip is not None:
                out.append(("whip", whip.stats()))
        return out

    async def serve(self) -> None:
        self.controller.defer = asyncio.get_running_loop().call_soon_threadsafe
        self.ingest.start()
        log.log(*receive_thread_note(self.settings, self.ingest))
        self.media.start()
        try:
            if self.wiring is not None:  # pre-warm before the first call is answered
                await asyncio.to_thread(self.wiring.start, self.media.playout_alive)
            await self.server.start()
            if self.audiosocket is not None:
                await self.audiosocket.start()
            if self.api is not None:
                await self.api.start()
        except BaseException:
            await self._close()
            raise
        if self.settings.sip_address[1] == 0:  # an ephemeral port: advertise the real one
            self.uas.config = replace(self.uas.config, port=self.server.port)
        if self.server.tls_port:  # likewise for an ephemeral TLS port
            self.uas.config = replace(self.uas.config, tls_port=self.server.tls_port)
        log.info("bridge listening for SIP on UDP and TCP port %d", self.server.port)
        self.ready.set()
        try:
            await self.stop_requested.wait()
            await self._drain()
        finally:
            await self._close()

    async def _close(self) -> None:
        if self.api is not None:
            await self.api.close()
        if self.audiosocket is not None:
            await self.audiosocket.close()
        await self.server.close()
        self.controller.defer = call_now  # media.stop() ends still-draining calls on this thread
        self.media.stop()
        self.ingest.close()
        if self.wiring is not None:
            await asyncio.to_thread(self.wiring.close)

    def request_stop(self) -> None:
        """Begin draining (what SIGTERM does); thread-unsafe: call on the loop."""
        self.controller.draining = True
        self.stop_requested.set()

    async def _drain(self) -> None:
        self.controller.draining = True
        deadline = time.monotonic() + self.settings.drain_timeout_s
        log.info("draining: %d live calls", len(self.controller.calls))
        while self.controller.calls and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.controller.calls:
            self.server.send(self.uas.hangup_all("drained", time.monotonic()))
            for call_id in list(self.controller.calls):  # no dialog: control API calls
                self.controller.end_call(call_id, "drained")
            grace = time.monotonic() + 2.0  # let BYE retransmissions get answered
            while len(self.uas.clients) and time.monotonic() < grace:
                await asyncio.sleep(0.05)
        grace = time.monotonic() + 1.0  # ended calls' buffered audio (media.drain_legs)
        while self.controller.ending and time.monotonic() < grace:
            await asyncio.sleep(0.02)


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="accept SIP/SIPREC calls and feed their RTP to the media core"
    )
    parser.add_argument("--config", type=Path, help="TOML settings file ([bridge] table)")
    parser.add_argument("--sip-listen", help="host:port for SIP over UDP and TCP")
    parser.add_argument("--rtp-ports", help="RTP port range, e.g. 20000-20999")
    parser.add_argument("--advertised-address", help="address put in SDP and Contact")
    parser.add_argument("--rtp-timeout", type=float, dest="rtp_timeout_s")
    parser.add_argument("--drain-timeout", type=float, dest="drain_timeout_s")
    parser.add_argument("--http-listen", help="host:port for /metrics, /ready, /health")
    parser.add_argument(
        "--api-listen", help='host:port for the control API, WHIP and media WebSockets ("" off)'
    )
    parser.add_argument("--models-dir", type=Path, help="default: $CALLSHIELD_MODELS_DIR")
    parser.add_argument(
        "--dev-fixture-models",
        nargs="?",
        const="tiny",
        choices=("tiny", "full"),
        help="demos/tests: build and load the fixture models (random weights, NOT detectors)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.load(
        args.config,
        sip_listen=args.sip_listen,
        rtp_ports=args.rtp_ports,
        advertised_address=args.advertised_address,
        rtp_timeout_s=args.rtp_timeout_s,
        drain_timeout_s=args.drain_timeout_s,
        http_listen=args.http_listen,
        api_listen=args.api_listen,
        dev_fixture_models=args.dev_fixture_models,
    )
    models = ModelSettings(models_dir=args.models_dir) if args.models_dir else ModelSettings()
    bridge = Bridge(settings, wiring=Wiring(settings, models=models))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(bridge.serve())
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, bridge.request_stop)
        await task

    asyncio.run(main())
    return 0
