"""Settings of the media process (``callshield bridge``): one pydantic-settings class.

Precedence: command-line flags, then environment (``CALLSHIELD_SIP_LISTEN``,
``CALLSHIELD_RTP_PORTS``, ...), then a TOML config file (``--config``; its top level or
its ``[bridge]`` table), then the defaults. Nothing is read at import time.
"""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.admission import check_seed_margin
from sip_bridge.sip.trust import PeerTrust
from sip_bridge.tenant import HEADER_NAME_RE, TenantRules


def split_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``127.0.0.1:5060``, ``[::1]:5060``, ``0.0.0.0`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if port and not port.isdigit():
        raise ValueError(f"bad port in {text!r}")
    return host, int(port) if port else default_port


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_", extra="ignore")

    sip_listen: str = "127.0.0.1:5060"
    # SIP over TLS: on when a certificate and its key are set; listens on sip_tls_listen
    # (default: the SIP host, port 5061). With sip_tls_ca every client must present a
    # certificate that CA signed (mutual TLS). sip_trusted_peers: comma-separated
    # networks and/or TLS certificate names (CN or subjectAltName) allowed to signal on
    # any transport; empty = everyone; anyone else gets 403 (sip_bridge.sip.trust)
    sip_tls_listen: str = ""
    sip_tls_cert: Path | None = None
    sip_tls_key: Path | None = None
    sip_tls_ca: Path | None = None
    sip_trusted_peers: str = ""
    rtp_ports: str = "20000-20999"
    # where RTP sockets bind (default: the SIP host); "::" = one dual-stack socket per
    # port for IPv4 and IPv6 peers (IPV6_V6ONLY set off explicitly), any other IPv6
    # address = IPv6 only (IPV6_V6ONLY on), an IPv4 address = IPv4 only
    rtp_host: str | None = None
    advertised_address: str | None = None  # in SDP and Contact (default: the SIP host)
    # the SDP connection (c=, o=) address answered to an IN IP4 offer, for a dual-stack
    # RTP bind (rtp_host "::"); default: advertised_address when it is of that family,
    # else (advertised_address unset) the SIP or RTP host when one is of that family and
    # not a wildcard; with none, the one address above (docs/operations.md)
    advertised_address_ip4: str | None = None
    advertised_address_ip6: str | None = None  # the same for an IN IP6 offer
    # one UDP port for every SIP leg's RTP instead of one port per leg from rtp_ports
    # (0 = off, the default): legs are told apart in C by the source address:port their
    # offer advertises (symmetric RTP) and its a=ssrc; fewer ports to open, less CPU per
    # packet (docs/operations.md, "Shared RTP port"); a leg whose key collides falls back
    # to a port from rtp_ports
    rtp_shared_port: int = Field(default=0, ge=0, le=65535)
    rtp_timeout_s: float = 30.0
    answer_delay_s: float = 0.0
    drain_timeout_s: float = 600.0
    retry_after_s: int = 30
    max_dialogs_per_source: int = 1000
    reject_siprec_when_draining: bool = False
    max_streams: int = 2048
    # the RTP receive thread's backend (native/ingest.py): "auto" = io_uring (multishot
    # recvmsg, provided buffers) when its setup works on this host, else epoll; the choice
    # and why are logged at start. "io_uring" when refused also falls back (WARNING)
    ingest_backend: Literal["auto", "epoll", "io_uring"] = "auto"
    # RTP receive pacing, µs (native/ingest.py coalesce_us; 0 = off, the default: the
    # receive thread wakes whenever a socket is ready). N > 0: after a wakeup it waits up
    # to N µs before reading again, only while the recent rate predicts >= 16 datagrams
    # in N µs: less CPU per packet, up to N µs more arrival-to-buffer delay
    # (docs/operations.md, "RTP receive pacing"); logged at start beside the backend
    ingest_coalesce_us: int = Field(default=0, ge=0, le=5000)
    # the RTP receive thread's real-time priority (native/ingest.py rt_priority; 0 = off,
    # the default: normal scheduling). 1..99 runs it SCHED_FIFO, so no other thread of
    # the host (detectors, the playout clock, SIP) preempts it between a recvmmsg and the
    # inserts: that preemption is the paced shared receiver's recvmmsg -> buffer p99.9
    # tail (docs/operations.md, "RTP receive pacing"). Needs CAP_SYS_NICE or root; refused,
    # the thread runs normally and a WARNING says so. It sleeps between batches, but a
    # flood holds it on one CPU (the kernel's RT throttling leaves others 5 % of it)
    ingest_rt_priority: int = Field(default=0, ge=0, le=99)
    jitter_max_delay_ms: int = 300
    # analysis (sip_bridge.wiring): the HTTP port for /metrics, /ready, /health ("" off),
    # detector threads, calls analysed at most, and the dev fixture models ("tiny",
    # "full"; "" = only the installed models)
    http_listen: str = "127.0.0.1:9464"
    detector_workers: int = Field(default=2, ge=1)
    # batches of ONE model run at once (its lane's max_inflight, at most detector_workers;
    # unset = detector_workers, so one heavy model may use every worker; ONNX Runtime runs
    # concurrent batches on one session safely). A model's cores at most: max_inflight x
    # detector_intra_op_threads (sip_bridge.detector_lanes; each lane logged at start)
    detector_max_inflight: int | None = Field(default=None, ge=1)
    detector_intra_op_threads: int = Field(default=1, ge=1)  # ONNX Runtime threads per batch
    # windows of one model per batch (micro-batching across calls). A window waits for its
    # whole batch, so on CPU, where batching buys little throughput (`bench capacity`
    # prints the ratio), a smaller batch trades nothing for a shorter wait
    detector_max_batch: int = Field(default=8, ge=1, le=256)
    max_analysed_calls: int = Field(default=200, ge=0)
    # admission's estimate before the first call (detectors.admission, docs/operations.md
    # "Admission") is the pre-warm's full-pool cost per window times this, for the CPU the
    # pre-warm cannot see (playout tick, ingest, VAD gate, publisher; measured 1.18-1.36 on
    # the 2-core reference box). Raise it when the node falls behind (queue wait, late
    # alerts) at the seeded capacity: fewer calls are analysed before real costs are
    # measured. Lower it (not below 1.0) when the node idles at that capacity. 1.0-4.0;
    # shown in /ready "capacity"
    admission_seed_margin: float = 1.2
    dev_fixture_models: Literal["", "tiny", "full"] = ""
    # audio provenance (DESIGN §2): the replay fingerprinter beside the installed models,
    # and the echo gate masking the internal leg's audio leaking into the external leg
    replay_detection: bool = True
    echo_gate: bool = True
    control_api_token: SecretStr | None = None  # bearer token of the control API (RTP attach)
    # the HTTP/WebSocket API (control API, WHIP, media WebSockets): host:port, "" = off
    api_listen: str = "127.0.0.1:8180"
    # media WebSockets (sip_bridge.adapters); an adapter without its credential is off.
    # Twilio signs with the account's auth token; twilio_public_url is the wss:// origin
    # Twilio connects to when a proxy terminates TLS. AudioHook: the integration's API
    # key and client secret (base64, as Genesys shows it; unset = API key only).
    twilio_auth_token: SecretStr | None = None
    twilio_public_url: str | None = None
    audiohook_api_key: SecretStr | None = None
    audiohook_client_secret: SecretStr | None = None
    ws_max_chunk_ms: int = Field(default=1000, ge=20, le=10000)  # audio in one message
    ws_media_burst_s: float = Field(default=5.0, gt=0)  # audio a client may send ahead
    ws_media_max_speed: float = Field(default=2.0, ge=1.0)  # x real time, beyond the burst
    ws_max_messages_per_s: float = Field(default=250.0, gt=0)
    ws_start_timeout_s: float = Field(default=10.0, gt=0)  # connect -> call started
    # WHIP (WebRTC publish, sip_bridge.adapters.whip): bearer token (none = off), audio
    # codecs in order of preference (those the native jitter buffer cannot decode are
    # skipped), the host addresses ICE offers ("" = aioice's choice, which skips
    # loopback), and the origins allowed by CORS ("*" or a comma list; "" = none)
    whip_token: SecretStr | None = None
    whip_codecs: str = "opus,PCMU,PCMA"
    whip_ice_addresses: str = ""
    whip_cors_origins: str = ""
    # Asterisk AudioSocket over TCP: host:port ("" = off), and the source addresses that
    # may connect (comma-separated CIDRs; empty = nobody). A connection's UUID must have
    # been registered first through POST /v1/audiosocket/calls (control_api_token).
    audiosocket_listen: str = ""
    audiosocket_allow: str = ""
    # FreeSWITCH mod_audio_fork / jambonz listen (WebSocket /v1/audio-fork): a bearer
    # token and/or basic auth "user:password"; with neither the endpoint refuses everyone
    audio_fork_token: SecretStr | None = None
    audio_fork_basic_auth: SecretStr | None = None
    # Amazon Connect live media (POST /v1/connect/contacts with control_api_token): the
    # boto3-free default source reads KVS captures in connect_media_dir (<stream>.mkv or
    # a relative path; a FIFO works) and, if allowed, stdin ("-"); or a plug-in source
    # "package.module:factory" (deploy/connect/kvs_getmedia.py calls GetMedia). None = off
    connect_media_dir: str = ""
    connect_media_stdin: bool = False
    connect_media_source: str = ""
    # STIR/SHAKEN (sip_bridge.sip.passport): trusted root CA certificates (a directory of
    # PEM files) and the certificates x5u URLs point to, fetched ahead of time (a
    # directory: index.json {url: file}, or files named sha256(url).pem). Without the
    # roots, PASSporTs are read but reported unverified.
    stir_ca_dir: Path | None = None
    stir_cert_cache: Path | None = None
    # tenants (sip_bridge.tenant, docs/integrations.md), resolved once per call, first
    # match wins: an explicit value (this SIP header on the INVITE, "" = not read; a
    # SIPREC metadata extension element named tenant; the control API's "tenant"), then
    # tenant_by_dnis_prefix, then tenant_by_source, then tenant_default
    tenant_header: str = "X-CallShield-Tenant"
    # early media (sip_bridge.call_state, docs/alerts.md): this SIP header on the INVITE
    # says the forked call is not answered yet ("early"), on a re-INVITE, UPDATE or INFO
    # that it was ("answered"); until then its windows never alert. "" = not read
    call_state_header: str = "X-CallShield-Call-State"
    # leg roles of a plain SIP fork (sip_bridge.leg_roles, docs/attach.md): this SIP header
    # on the INVITE (or a re-INVITE/UPDATE) lists the role of each audio m-line in order,
    # e.g. "external,internal" (external, internal, mixed, unknown); without it those legs
    # are mixed and voice detectors abstain. "" = not read
    leg_roles_header: str = "X-CallShield-Leg-Roles"
    # a plain SIP fork's m-line whose a=label is exactly a role word (external, internal,
    # mixed, unknown; case-insensitive) gets that role when the header does not name it
    leg_role_labels: bool = True
    # the tenant of calls nothing else names (a tenant id, ^[a-z0-9][a-z0-9_-]{0,31}$)
    tenant_default: str = "default"
    # comma-separated tenant ids; when set, an explicit value outside it (and outside
    # tenant_default) is rejected and counted, and the call resolves as if it had sent
    # none. "" = any well-formed id is taken
    tenants_known: str = ""
    # called-number prefix -> tenant, longest prefix wins (JSON in the environment, a
    # TOML table in --config), e.g. {"+1800555": "acme", "+1888": "globex"}
    tenant_by_dnis_prefix: dict[str, str] = Field(default_factory=dict)
    # signalling source (trunk address or network) -> tenant, most specific network
    # wins, e.g. {"10.1.0.0/16": "acme", "192.0.2.7": "globex"}
    tenant_by_source: dict[str, str] = Field(default_factory=dict)

    @field_validator("admission_seed_margin")
    @classmethod
    def _seed_margin(cls, value: float) -> float:
        return check_seed_margin(value)

    @field_validator("sip_listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_host_port(value, 5060)
        return value

    @field_validator("sip_tls_listen")
    @classmethod
    def _tls_listen(cls, value: str) -> str:
        if value:
            split_host_port(value, 5061)
        return value

    @field_validator("advertised_address_ip4", "advertised_address_ip6")
    @classmethod
    def _family_address(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value:
            return None
        want = 4 if info.field_name == "advertised_address_ip4" else 6
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            return value  # a name (RFC 8866 allows an FQDN in c=)
        if ip.version != want or ip.is_unspecified:
            raise ValueError(f"{info.field_name} {value!r} is not a usable IPv{want} address")
        return value

    def sdp_addresses(self) -> tuple[str | None, str | None]:
        """The addresses SDP answers give an IN IP4 and an IN IP6 offer (None: no
        address of that family is known; the answer then carries the one advertised
        address, as before per-family answers)."""
        auto = (
            [self.advertised_address]
            if self.advertised_address
            else [
                self.sip_address[0],
                self.rtp_host or "",
            ]
        )
        found: dict[int, str] = {}
        for candidate in auto:
            try:
                ip = ipaddress.ip_address(candidate.split("%", 1)[0])
            except ValueError:
                continue  # a name or unset: its family is unknown
            if not ip.is_unspecified:
                found.setdefault(ip.version, candidate)
        return (
            self.advertised_address_ip4 or found.get(4),
            self.advertised_address_ip6 or found.get(6),
        )

    @field_validator("sip_trusted_peers")
    @classmethod
    def _trusted_peers(cls, value: str) -> str:
        PeerTrust.parse(value)
        return value

    @model_validator(mode="after")
    def _tls_complete(self) -> Settings:
        if (self.sip_tls_cert is None) != (self.sip_tls_key is None):
            raise ValueError("SIP over TLS needs both sip_tls_cert and sip_tls_key")
        if self.sip_tls_cert is None and (self.sip_tls_listen or self.sip_tls_ca):
            raise ValueError("sip_tls_listen and sip_tls_ca need sip_tls_cert and sip_tls_key")
        return self

    @model_validator(mode="after")
    def _inflight_within_workers(self) -> Settings:
        if (self.detector_max_inflight or 0) > self.detector_workers:
            raise ValueError(
                f"detector_max_inflight {self.detector_max_inflight} exceeds detector_workers "
                f"{self.detector_workers}: a lane cannot run more batches than the pool"
            )
        return self

    @field_validator("tenant_header", "call_state_header", "leg_roles_header")
    @classmethod
    def _header_name(cls, value: str, info: ValidationInfo) -> str:
        if value and not HEADER_NAME_RE.fullmatch(value):
            raise ValueError(f"{info.field_name} {value!r} is not a SIP header name")
        return value

    @model_validator(mode="after")
    def _tenant_rules(self) -> Settings:
        self.tenant_rules  # noqa: B018 - ValueError on a bad table or tenant id
        return self

    @property
    def tenant_rules(self) -> TenantRules:
        return TenantRules.parse(
            self.tenant_default,
            self.tenants_known.split(","),
            self.tenant_by_dnis_prefix,
            self.tenant_by_source,
        )

    @field_validator("api_listen")
    @classmethod
    def _api_listen(cls, value: str) -> str:
        if value:
            split_host_port(value, 8180)
        return value

    @field_validator("audiosocket_listen")
    @classmethod
    def _audiosocket_listen(cls, value: str) -> str:
        if value:
            split_host_port(value, 8090)
        return value

    @field_validator("audiosocket_allow")
    @classmethod
    def _audiosocket_allow(cls, value: str) -> str:
        cls.networks(value)
        return value

    @staticmethod
    def networks(value: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """``"10.0.0.0/8, 192.0.2.7"`` -> networks (a bare address is a /32 or /128)."""
        items = [v.strip() for v in value.split(",") if v.strip()]
        return tuple(ipaddress.ip_network(v, strict=False) for v in items)

    @field_validator("rtp_ports")
    @classmethod
    def _ports(cls, value: str) -> str:
        cls.port_range(value)
        return value

    @staticmethod
    def port_range(value: str) -> tuple[int, int]:
        low, sep, high = value.partition("-")
        if not sep or not low.strip().isdigit() or not high.strip().isdigit():
            raise ValueError(f"RTP ports must look like 20000-20999, got {value!r}")
        lo, hi = int(low), int(high)
        if not 0 < lo < hi < 65536:
            raise ValueError(f"bad RTP port range {value!r}")
        return lo, hi

    @property
    def sip_address(self) -> tuple[str, int]:
        return split_host_port(self.sip_listen, 5060)

    @property
    def sip_tls_address(self) -> tuple[str, int] | None:
        """Where SIP over TLS listens, or None when no certificate is configured."""
        if self.sip_tls_cert is None:
            return None
        return split_host_port(self.sip_tls_listen or self.sip_address[0], 5061)

    @property
    def api_address(self) -> tuple[str, int] | None:
        return split_host_port(self.api_listen, 8180) if self.api_listen else None

    @property
    def audiosocket_address(self) -> tuple[str, int] | None:
        return split_host_port(self.audiosocket_listen, 8090) if self.audiosocket_listen else None

    @property
    def audiosocket_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return self.networks(self.audiosocket_allow)

    @property
    def rtp_range(self) -> tuple[int, int]:
        return self.port_range(self.rtp_ports)

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> Settings:
        """Defaults < config file < environment < overrides (None values ignored)."""
        file_values: dict[str, Any] = {}
        if config_file is not None:
            with config_file.open("rb") as f:
                data = tomllib.load(f)
            table = data.get("bridge", data)
            file_values = {str(k).replace("-", "_"): v for k, v in table.items()}
        from_env = cls()
        env_values = {k: getattr(from_env, k) for k in from_env.model_fields_set}
        given = {k: v for k, v in overrides.items() if v is not None}
        return cls.model_validate({**file_values, **env_values, **given})
