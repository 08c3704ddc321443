"""Least privilege on the bus: one Redis ACL user per component, with only the keys and
commands its code uses (``callshield redis-acl`` applies or prints them).

Key patterns come from the key layout itself (``detectors.bus.keys``, and the
dashboard's ``dash:`` namespace), under the configured prefix with glob characters
escaped. ``~pattern`` grants read and write, ``%R~pattern`` read only (Redis >= 7.0).
A command a user may run touches only the keys its rules allow; a *selector*
``(...)`` grants a command set on a key set of its own, so the webhook dispatcher may
read the alert stream through its consumer group without being able to ``XADD`` to it.

  bridge     writes alerts (Lua dedupe + XADD), scores, call events, call state and
             system events; reads watchlists, enrolments, mid-call updates and the
             alert policy; owns fingerprints (the shared ``fp:log``, allowlist
             candidates) and ANI counters; reads the benign audio allowlist; writes
             evidence records (sealed clips and embeddings) and their call indexes;
             owns node liveness (``node:*`` heartbeats and owned-call sets, the
             ``nodes`` registry, the ``nodes:reaper`` lock: every bridge reaps lost
             nodes' calls)
  dashboard  reads alerts, scores, call events, call state and system events; owns
             ``dash:*`` (users, sessions, triage, labels, audit), the watchlists,
             enrolments, the alert policy and the benign audio allowlist (and
             confirms or rejects its candidates), and writes mid-call updates; manages
             webhook endpoints and replays dead letters (``wh:*`` but the attempt
             log, which it only reads); reads evidence, and may only PERSIST and
             EXPIREAT it (legal hold; erasing a subject expires it at once), and
             XDEL fingerprints from ``fp:log`` (erasing a subject); cannot write what
             the bridge owns
  webhooks   owns ``wh:*``; on the alert and system-event streams only its consumer
             group's commands
  retention  ``callshield redis trim``: trims the alert stream, nothing else

Passwords go to Redis as their SHA-256 (``#<hex>``): the plain password is neither sent
nor written to an ACL file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from detectors.bus.keys import Keys

# commands newer than Redis 7.0 (Debian 12): left out for older servers, where an
# unknown command in ACL SETUSER (or an ACL file) is an error
_SINCE: dict[str, tuple[int, int]] = {"waitaof": (7, 2)}

_CONNECT = ("ping", "select")  # redis-py's health checks; SELECT for a /db in the URL
_SCRIPTS = ("evalsha", "script|load", "script|exists")  # redis-py's Script objects
_TRANSACTIONS = ("multi", "exec", "discard")  # pipeline(transaction=True)


@dataclass(frozen=True, slots=True)
class Grant:
    """Key selectors (``~pat`` read-write, ``%R~pat`` read-only) and the commands
    allowed on them."""

    keys: tuple[str, ...]
    commands: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    purpose: str
    root: Grant
    selectors: tuple[Grant, ...] = ()


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _rw(*patterns: str) -> tuple[str, ...]:
    return tuple(f"~{p}" for p in patterns)


def _ro(*patterns: str) -> tuple[str, ...]:
    return tuple(f"%R~{p}" for p in patterns)


def components(prefix: str) -> dict[str, Component]:
    """Every component's grants for the key ``prefix``."""
    k = Keys(glob_escape(prefix))  # the layout's own key builders, with '*' as the id
    dash = f"{k.prefix}dash:*"  # dashboard.keys.DashKeys: everything under dash:
    # system events (coverage degraded/recovered): a stream beside the alerts and the
    # latest event per topic/node/subject
    system, system_state = f"{k.prefix}{{alerts}}:system", f"{k.prefix}system:state"
    bus_state = (
        k.alerts,
        k.alert_seen("*"),
        k.scores,
        k.events,
        k.call("*"),
        k.live_calls,
        k.external_id("*", "*"),
        system,
        system_state,
    )
    # watchlists (with their version counters) and enrolments: the dashboard and
    # `callshield watchlist` write them, bridges only read; likewise mid-call updates
    # likewise the benign audio allowlist (its candidates: bridges propose, the
    # dashboard confirms or rejects)
    shared_ro = (k.watchlist("*"), k.enrolment("*", "*"), k.call_updates, k.allowlist("*"))
    # the alert policy: admins change it on the dashboard, bridges read it (hot reload)
    policy = (k.policy, k.policy_version, k.policy_counter)
    shared_rw = (k.fingerprint("*"), k.ani_counter("*", "*"), k.replay_related("*"))
    # node liveness (detectors.bus.liveness): k.node("*") also covers k.node_calls
    liveness = (k.node("*"), k.nodes, k.reaper_lock, k.node_status("*"))
    # what the dashboard reads of them: the system page's nodes, related calls by replay
    dash_reads = (k.node("*"), k.nodes, k.node_status("*"), k.replay_related("*"))
    webhooks = f"{k.prefix}wh:*"
    evidence = f"{k.prefix}evidence:*"  # k.evidence_index("*"), k.evidence("*", "*")
    # what the dashboard's webhook pages change (detectors.bus.webhooks.admin): endpoints,
    # and for a replay the delivery, its call's queue, the due, dead and parked sets
    wh_manage = (
        k.wh_endpoints,
        k.wh_delivery("*", "*"),
        k.wh_queue("*", "*"),
        k.wh_due,
        k.wh_dead,
        k.wh_parked,
    )
    found = [
        Component(
            "bridge",
            "media process: publishes alerts, scores, call events and call state",
            Grant(
                keys=_rw(*bus_state, *shared_rw, evidence, *liveness) + _ro(*shared_ro, *policy),
                commands=(
                    *_CONNECT,
                    *_SCRIPTS,
                    "client|id",  # the publisher notices a reconnect (possible data loss)
                    "info",  # strict durability: version and replicas
                    "wait",
                    "waitaof",
                    "xadd",
                    "hset",
                    "hget",
                    "expire",
                    "persist",
                    "zadd",
                    "zrem",
                    "zremrangebyscore",  # caller_id ANI velocity: trim the windows
                    "zcard",  # caller_id ANI velocity: count them
                    "set",  # extid:<system>:<id> -> call id
                    "exists",  # the call-risk script
                    *_TRANSACTIONS,  # watchlist version and entries read together
                    "get",  # watchlist version, enrolments
                    "hgetall",  # watchlist entries
                    "xread",  # mid-call updates
                    "xrevrange",  # where the updates stream ends at start
                    "expireat",  # evidence records (detectors.bus.evidence_store)
                    # node liveness: owned-call sets, the registry, the reaper's checks
                    "sadd",
                    "srem",
                    "smembers",
                    "hexists",
                    "hdel",
                    "del",
                ),
            ),
        ),
        Component(
            "dashboard",
            "web process: reads the bus, owns analysts' state and watchlists",
            Grant(
                keys=_rw(dash, *shared_ro, *wh_manage, *policy, k.allowlist_candidates("*"))
                + _ro(*bus_state, k.wh_log, evidence, *dash_reads),
                commands=(
                    *_CONNECT,
                    *_TRANSACTIONS,
                    *_SCRIPTS,  # the webhook replay script (DeliveryQueue.replay)
                    "info",
                    "get",
                    "set",
                    "del",
                    "incrby",  # redis-py sends INCR as INCRBY
                    "expire",
                    "hget",
                    "hgetall",
                    "hvals",
                    "hset",
                    "hsetnx",
                    "hdel",
                    "rpush",
                    "lrange",
                    "zrevrange",
                    "zcard",
                    "xadd",
                    "xrevrange",
                    "xrange",  # scores and alerts of a span: the policy what-if
                    "time",  # where that span starts (stream ids are the server's clock)
                    "xread",
                    "xinfo|stream",
                    "xinfo|groups",
                    # webhook endpoints, their health, enable (resumes parked queues) and
                    # the replay script's own commands
                    "zadd",
                    "zrem",
                    "smembers",
                    "srem",
                    "exists",
                    "hincrby",
                    "hmget",  # an evidence record's meta and ciphertext
                    "ttl",  # how long evidence has left
                    "watch",  # approving a watchlist entry: read, check, write if unchanged
                    "unwatch",
                    # erasing a subject (detectors.bus.erasure): find their enrolments
                    # and watchlists, delete their claims from the updates stream
                    "scan",
                    "xdel",
                ),
            ),
            # legal hold: evidence loses or regains its expiry, and nothing else
            selectors=(
                Grant(keys=_rw(evidence), commands=("persist", "expireat")),
                # erasing a subject: their calls' fingerprints, nothing else of fp:log
                Grant(keys=_rw(k.fingerprint_log), commands=("xrange", "xdel")),
            ),
        ),
        Component(
            "webhooks",
            "webhook dispatcher and `callshield webhooks`: endpoints, deliveries",
            Grant(
                keys=_rw(webhooks),
                commands=(
                    *_CONNECT,
                    *_SCRIPTS,
                    *_TRANSACTIONS,
                    "exists",
                    "hget",
                    "hgetall",
                    "hset",
                    "hdel",
                    "hincrby",
                    "rpush",
                    "lpop",
                    "llen",
                    "lindex",
                    "zadd",
                    "zrem",
                    "zrange",
                    "zrangebyscore",
                    "sadd",
                    "srem",
                    "smembers",
                    "xadd",
                    "get",  # the intake's holder (the lead and enqueue scripts)
                    "set",
                ),
            ),
            selectors=(
                # one XREADGROUP reads both streams: both keys in the same selector
                Grant(
                    keys=_rw(k.alerts, system),
                    commands=("xgroup|create", "xreadgroup", "xack", "xautoclaim"),
                ),
            ),
        ),
        Component(
            "retention",
            "`callshield redis trim`: trims the alert stream below what groups acked",
            Grant(
                keys=_rw(k.alerts),
                commands=(*_CONNECT, "xinfo|groups", "xpending", "xtrim"),
            ),
        ),
    ]
    return {c.name: c for c in found}


def password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def _commands(grant: Grant, version: tuple[int, int]) -> list[str]:
    return [f"+{c}" for c in grant.commands if version >= _SINCE.get(c, (0, 0))]


def rules(component: Component, password: str, version: tuple[int, int]) -> list[str]:
    """``ACL SETUSER <name>`` arguments: everything reset first, so applying twice or
    over an older definition leaves exactly these rights."""
    out = ["reset", "on", f"#{password_hash(password)}", "resetchannels"]
    out += [*component.root.keys, *_commands(component.root, version)]
    for sel in component.selectors:
        out.append("(" + " ".join([*sel.keys, *_commands(sel, version)]) + ")")
    return out


def acl_file_line(component: Component, password: str, version: tuple[int, int]) -> str:
    """The same user as an ACL file line (``aclfile`` in redis.conf, ``ACL LOAD``)."""
    return " ".join(["user", component.name, *rules(component, password, version)])


def parse_version(text: str) -> tuple[int, int]:
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ValueError(f"not a Redis version: {text!r} (e.g. 7.0)") from None
