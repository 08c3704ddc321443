"""Every Redis key CallShield uses, under one configurable prefix (DESIGN.md §6).

Streams:
  ``{alerts}``            durable alert stream (every revision once); trimmed only below
                          what every consumer group has acknowledged and older than the
                          retention (``detectors.bus.retention``)
  ``{alerts}:seen:<id>``  hash revision -> stream entry id: the (alert_id, revision)
                          dedupe that makes a retried XADD a no-op (same hash slot as
                          the stream, so the Lua script also runs on Redis Cluster)
  ``scores``, ``events``  lossy streams, ``MAXLEN ~``
  ``{alerts}:system``     system events (``system.coverage.degraded``, ...): low volume,
                          read by the webhook dispatcher's group beside the alerts (same
                          hash slot, so one XREADGROUP reads both on Redis Cluster)
  ``system:state``        hash ``<topic>:<node>:<subject>`` -> the latest system event
                          (the dashboard's coverage banner)
Call state: ``call:<call_id>`` hash for live calls (the last call event, and
``risk:<dimension>``: the latest alert of each dimension), ``calls:live`` sorted set,
``extid:<system>:<id>`` -> call id (Twilio CallSid, Asterisk channel, SIP Call-ID, ...).
Node liveness (``detectors.bus.liveness``): ``node:<node_id>`` the node's heartbeat (its
process's boot id, with a TTL), ``nodes`` hash boot id -> node id of every bridge process
that may own live calls, ``node:<node_id>:<boot>:calls`` the live calls that process
owns, ``nodes:reaper`` the short lock under which one bridge ends a lost node's calls,
``nodestatus:<node_id>`` the node's status summary JSON (same TTL as its heartbeat).
Detector shared state: ``watchlist:<tenant>`` hash entry id -> entry JSON with its
``watchlist:<tenant>:version`` counter (bumped by every change: the bridges' caches
reload on it), ``enrol:<tenant>:<subject>`` enrolment JSON (``detectors.bus.biometrics``),
``fp:<bucket>``, ``ani:<window>:<ani_hash>`` (ANIs only as keyed hashes, never raw).
Benign audio (``detectors.bus.allowlist``): ``allow:<tenant>`` hash entry id -> entry JSON
with its ``allow:<tenant>:version`` counter (the dashboard writes, bridges read);
``fp:cand:<tenant>`` hash candidate id -> candidate JSON (bridges propose, the dashboard
confirms or rejects); ``fp:log`` the bridges' shared stream of external-leg fingerprints;
``replay:related:<call>`` the calls a call's audio was matched with as a replay.
Commands to bridges: ``calls:updates`` stream of mid-call claims (``PATCH`` on a call),
read by every bridge, applied by the one that owns the call.
Alert policy (``detectors.bus.policy_store``): ``policy`` the current policy JSON,
``policy:version`` its version (what bridges poll), ``policy:counter`` the counter
versions are numbered by. Analysts' labels: ``dash:labels`` (the dashboard's namespace,
read by ``callshield calibrate``).
Webhooks: ``wh:*`` (``detectors.bus.webhooks.store``).
Evidence (``detectors.bus.evidence_store``), hash-tagged by call so one script writes a
record and its index: ``evidence:{<call_id>}`` hash evidence id -> receipt JSON (what was
kept, until when; no content), ``evidence:{<call_id>}:<evidence_id>`` hash ``meta`` +
``blob`` (AES-GCM ciphertext). Both expire (TTL) unless on legal hold.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "callshield:"

    # --- streams ------------------------------------------------------------------
    @property
    def alerts(self) -> str:
        return f"{self.prefix}{{alerts}}"

    def alert_seen(self, alert_id: str) -> str:
        return f"{self.prefix}{{alerts}}:seen:{alert_id}"

    @property
    def scores(self) -> str:
        return f"{self.prefix}scores"

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    @property
    def system(self) -> str:
        return f"{self.prefix}{{alerts}}:system"

    @property
    def system_state(self) -> str:
        return f"{self.prefix}system:state"

    # --- call state ---------------------------------------------------------------
    def call(self, call_id: str) -> str:
        return f"{self.prefix}call:{call_id}"

    @property
    def live_calls(self) -> str:
        return f"{self.prefix}calls:live"

    def external_id(self, system: str, value: str) -> str:
        """A PBX's / CPaaS's own id of a call -> our call id (string key)."""
        return f"{self.prefix}extid:{system}:{value}"

    # --- node liveness (detectors.bus.liveness) -------------------------------------
    def node(self, node_id: str) -> str:
        """The node's heartbeat: its current process's boot id, expiring unless renewed."""
        return f"{self.prefix}node:{node_id}"

    def node_status(self, node_id: str) -> str:
        """The node's status summary (``detectors.bus.node_status``), renewed with its
        heartbeat and expiring with it."""
        return f"{self.prefix}nodestatus:{node_id}"

    def replay_related(self, owner: str) -> str:
        """Set of the calls (call or correlation ids) whose external audio matched this
        call's as a replay, either way (``detectors.replay.shared_state``)."""
        return f"{self.prefix}replay:related:{owner}"

    def node_calls(self, node_id: str, boot: str) -> str:
        """Set of the live calls one bridge process (node id + boot id) owns."""
        return f"{self.prefix}node:{node_id}:{boot}:calls"

    @property
    def nodes(self) -> str:
        """Hash boot id -> node id: every bridge process that may own live calls."""
        return f"{self.prefix}nodes"

    @property
    def reaper_lock(self) -> str:
        return f"{self.prefix}nodes:reaper"

    # --- detector shared state (DESIGN §1 SharedState) ------------------------------
    def watchlist(self, tenant: str) -> str:
        return f"{self.prefix}watchlist:{tenant}"

    def watchlist_version(self, tenant: str) -> str:
        return f"{self.prefix}watchlist:{tenant}:version"

    def enrolment(self, tenant: str, subject: str) -> str:
        return f"{self.prefix}enrol:{tenant}:{subject}"

    @property
    def call_updates(self) -> str:
        """Stream of mid-call claims for the bridges (``detectors.bus.biometrics``)."""
        return f"{self.prefix}calls:updates"

    def fingerprint(self, bucket: str) -> str:
        return f"{self.prefix}fp:{bucket}"

    def ani_counter(self, window: str, ani_hash: str) -> str:
        return f"{self.prefix}ani:{window}:{ani_hash}"

    # --- benign audio allowlist and replay fingerprints (detectors.bus.allowlist) -----
    def allowlist(self, tenant: str) -> str:
        return f"{self.prefix}allow:{tenant}"

    def allowlist_version(self, tenant: str) -> str:
        return f"{self.prefix}allow:{tenant}:version"

    def allowlist_candidates(self, tenant: str) -> str:
        return f"{self.prefix}fp:cand:{tenant}"

    @property
    def fingerprint_log(self) -> str:
        return f"{self.prefix}fp:log"

    # --- alert policy (detectors.bus.policy_store) -------------------------------------
    @property
    def policy(self) -> str:
        return f"{self.prefix}policy"

    @property
    def policy_version(self) -> str:
        return f"{self.prefix}policy:version"

    @property
    def policy_counter(self) -> str:
        return f"{self.prefix}policy:counter"

    @property
    def analyst_labels(self) -> str:
        """Hash alert id -> label JSON; written by the dashboard (``DashKeys.labels``)."""
        return f"{self.prefix}dash:labels"

    # --- evidence (detectors.bus.evidence_store) ------------------------------------
    def evidence_index(self, call_id: str) -> str:
        return f"{self.prefix}evidence:{{{call_id}}}"

    def evidence(self, call_id: str, evidence_id: str) -> str:
        return f"{self.prefix}evidence:{{{call_id}}}:{evidence_id}"

    # --- webhooks -------------------------------------------------------------------
    @property
    def wh_endpoints(self) -> str:
        """Hash endpoint id -> endpoint JSON (secrets encrypted)."""
        return f"{self.prefix}wh:endpoints"

    def wh_delivery(self, endpoint_id: str, event_id: str) -> str:
        return f"{self.prefix}wh:d:{endpoint_id}:{event_id}"

    def wh_queue(self, endpoint_id: str, call_key: str) -> str:
        """One FIFO per (endpoint, call): per-call ordering."""
        return f"{self.prefix}wh:q:{endpoint_id}:{call_key}"

    @property
    def wh_intake(self) -> str:
        """String: the consumer that holds the intake (one reader per group keeps
        per-call order across dispatchers), with a TTL it renews."""
        return f"{self.prefix}wh:intake"

    @property
    def wh_due(self) -> str:
        """Sorted set: queue name -> when its head is due (clock seconds)."""
        return f"{self.prefix}wh:due"

    @property
    def wh_parked(self) -> str:
        """Set of queues whose endpoint is disabled: resumed on enable."""
        return f"{self.prefix}wh:parked"

    @property
    def wh_dead(self) -> str:
        """Sorted set: dead-lettered delivery keys by when they died."""
        return f"{self.prefix}wh:dead"

    @property
    def wh_log(self) -> str:
        """Stream: one entry per attempt (capped)."""
        return f"{self.prefix}wh:log"
