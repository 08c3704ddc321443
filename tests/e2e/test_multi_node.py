"""Two real bridge processes on one Redis, with the dashboard and the webhook dispatcher.

`callshield bridge` twice (node-a, node-b: their own SIP, RTP and HTTP ports and state
directories, the dev fixture models), one real redis-server, `callshield dashboard` and
`callshield webhooks run` as processes, and a real webhook receiver. SIPp places SIPREC
calls of real speech (on the external stream) into both bridges; the calls whose audio
carries the synthetic-voice fixture's marker tone raise alerts. Then node-b is killed
with SIGKILL mid-call.

What must hold:
- the dashboard lists the live calls of both nodes and the alerts of both (node_id);
- the dispatcher delivers every alert revision in Redis exactly once;
- after node-b dies, node-a's call goes on, ends normally (BYE), and its alerts get
  their final revision, delivered once;
- node-b's call is ended by node liveness (``detectors.bus.liveness``): node-b's
  heartbeat (0.5 s here, so lost after 1.5 s) lapses, node-a's reaper ends its live
  call with reason ``node_lost`` (one ``ended`` event, off the dashboard's live list,
  shown ended) and gives its alert a final ``ended`` revision, which the dispatcher
  delivers like any other; node-a's calls are untouched and end by their own BYE.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import bridge_nodes
import httpx
import numpy as np
import numpy.typing as npt
import pytest
import redis
from bridge_nodes import Proc, cli, marked
from bridge_runner import free_udp_port, load_speech, wait_for
from cryptography.fernet import Fernet
from rtp_pcap import write_rtp_pcap

from detectors.alert_schema import Alert, CallEvent, event_id
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer, free_port
from tests.bus.receiver import Receiver

PREFIX = "mn:"
CALL_S = {"long": 9.0, "short": 2.0}
SIPREC = Path(__file__).resolve().parents[1] / "sip/scenarios/uac_siprec.xml"


class Node(bridge_nodes.Node):
    def __init__(self, name: str, env: dict[str, str], tmp: Path, rtp_base: int) -> None:
        super().__init__(
            name,
            env,
            tmp,
            rtp_base,
            50,
            {
                "CALLSHIELD_DRAIN_TIMEOUT_S": "3",
                "CALLSHIELD_NODE_HEARTBEAT_S": "0.5",  # lost after 1.5 s without a beat
            },
        )


def _sipp(node: Node, workdir: Path, audio: npt.NDArray[np.int16], seconds: float) -> Proc:
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", audio, ssrc=0x5EED00 + node.sip_port)
    scenario = SIPREC.read_text()  # external stream 1 plays the pcap, internal 2 is silent
    assert '<pause milliseconds="2600"/>' in scenario
    pause = f'<pause milliseconds="{int(seconds * 1000)}"/>'
    (workdir / "call.xml").write_text(scenario.replace('<pause milliseconds="2600"/>', pause))
    sipp = shutil.which("sipp")
    assert sipp, "SIPp (Debian sip-tester) is required: .ci/install.sh installs it"
    cmd = [sipp, "-sf", "call.xml", "-i", "127.0.0.1", "-p", str(free_udp_port())]
    cmd += ["-mp", str(free_udp_port()), "-m", "1", "-timeout", "25s", "-nostdin"]
    cmd += ["-set", "port2", str(free_udp_port())]
    cmd += [f"127.0.0.1:{node.sip_port}"]
    return Proc("sipp", cmd, dict(os.environ), workdir, cwd=workdir)


def _stream(client: redis.Redis, key: str) -> list[Any]:
    return [decode(fields) for _, fields in client.xrange(key)]


@pytest.fixture
def cluster(tmp_path: Path, redis_server: RedisServer) -> Iterator[dict[str, Any]]:
    env = {
        **os.environ,
        "CALLSHIELD_REDIS_URL": redis_server.url,
        "CALLSHIELD_KEY_PREFIX": PREFIX,
        "CALLSHIELD_MODELS_DIR": str(tmp_path / "no-models"),
        "CALLSHIELD_WEBHOOK_KEY": Fernet.generate_key().decode(),
        "CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
    }
    receiver = Receiver()
    with ExitStack() as stack:
        stack.callback(receiver.close)
        added = subprocess.run(
            cli("webhooks", "add", receiver.url, "--allow-private"),
            env={**env, "CALLSHIELD_STATE_DIR": str(tmp_path / "cli")},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert added.returncode == 0, added.stderr
        receiver.secrets = [added.stdout.split("shown once): ")[1].strip()]
        dash_env = {**env, "CALLSHIELD_STATE_DIR": str(tmp_path / "dashboard")}
        key = subprocess.run(
            cli("dashboard", "create-api-key", "multi-node"),
            env=dash_env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        base = 41000 + (os.getpid() % 40) * 100
        nodes = [Node("node-a", env, tmp_path, base), Node("node-b", env, tmp_path, base + 50)]
        dash_port = free_port()
        procs = [n.proc for n in nodes] + [
            Proc(
                "dashboard",
                cli("dashboard", "--listen", f"127.0.0.1:{dash_port}"),
                dash_env,
                tmp_path,
            ),
            Proc(
                "webhooks",
                cli("webhooks", "run"),
                {**env, "CALLSHIELD_STATE_DIR": str(tmp_path / "wh"), "CALLSHIELD_NODE_ID": "wh"},
                tmp_path,
            ),
        ]
        for p in procs:
            stack.callback(p.stop)
        dash = httpx.Client(
            base_url=f"http://127.0.0.1:{dash_port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=5,
        )
        stack.callback(dash.close)

        def up() -> bool:
            try:
                ok = dash.get("/health").status_code < 500
            except httpx.HTTPError:
                ok = False
            return all(n.ready() for n in nodes) and ok

        assert wait_for(up, 30), "\n".join(p.tail() for p in procs)
        client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
        stack.callback(client.close)
        try:
            yield {"nodes": nodes, "dash": dash, "receiver": receiver, "redis": client}
        except BaseException:
            print("\n".join(p.tail() for p in procs))
            raise


def test_two_bridges_one_redis_dashboard_webhooks_and_a_killed_node(
    cluster: dict[str, Any], shared_dir: Path, tmp_path: Path
) -> None:
    node_a, node_b = cluster["nodes"]
    dash: httpx.Client = cluster["dash"]
    receiver: Receiver = cluster["receiver"]
    client: redis.Redis = cluster["redis"]
    keys = Keys(PREFIX)
    speech = load_speech(shared_dir, CALL_S["long"])
    short = load_speech(shared_dir, CALL_S["short"], skip=20)
    calls = {
        # a long marked call on each node, and a short genuine one
        "a-long": _sipp(node_a, tmp_path / "a-long", marked(speech), CALL_S["long"]),
        "b-long": _sipp(node_b, tmp_path / "b-long", marked(speech), CALL_S["long"]),
        "a-short": _sipp(node_a, tmp_path / "a-short", short, CALL_S["short"]),
        "b-short": _sipp(node_b, tmp_path / "b-short", short, CALL_S["short"]),
    }
    try:
        _run(calls, node_a, node_b, dash, receiver, client, keys)
    finally:
        for p in calls.values():
            p.stop()


def _alerts(client: redis.Redis, keys: Keys) -> list[Alert]:
    return [m for m in _stream(client, keys.alerts) if isinstance(m, Alert)]


def _events(client: redis.Redis, keys: Keys) -> list[CallEvent]:
    return [m for m in _stream(client, keys.events) if isinstance(m, CallEvent)]


def _run(
    calls: dict[str, Proc],
    node_a: Node,
    node_b: Node,
    dash: httpx.Client,
    receiver: Receiver,
    client: redis.Redis,
    keys: Keys,
) -> None:
    # both nodes raise an alert on their marked call while it is live
    def alert_nodes() -> set[str]:
        return {a["node_id"] for a in dash.get("/api/v1/alerts").json()}

    assert wait_for(lambda: alert_nodes() == {"node-a", "node-b"}, 15), alert_nodes()
    by_node = {a.node_id: a.call_id for a in _alerts(client, keys)}
    live = {c["call_id"]: c for c in dash.get("/api/v1/calls").json()}
    assert {by_node["node-a"], by_node["node-b"]} <= set(live)  # both nodes' live calls
    assert live[by_node["node-b"]]["state"] != "ended" and live[by_node["node-b"]]["alerts"] == 1

    # the short genuine calls end on both nodes, with no alert
    assert wait_for(lambda: calls["a-short"].p.poll() is not None, 15)
    assert wait_for(lambda: calls["b-short"].p.poll() is not None, 15)
    assert calls["a-short"].p.returncode == 0 and calls["b-short"].p.returncode == 0
    assert wait_for(lambda: sum(e.event == "ended" for e in _events(client, keys)) == 2, 10)
    ended_short = {e.call_id for e in _events(client, keys) if e.event == "ended"}
    assert not ended_short & set(by_node.values())

    # node-b dies mid-call
    node_b.proc.p.send_signal(signal.SIGKILL)
    node_b.proc.p.wait(5)
    b_call, a_call = by_node["node-b"], by_node["node-a"]
    b_last = max(a.revision for a in _alerts(client, keys) if a.call_id == b_call)

    # node-b's heartbeat lapses: node-a's reaper ends its live call, reason node_lost
    def live_ids() -> set[str]:
        return {c["call_id"] for c in dash.get("/api/v1/calls").json()}

    assert wait_for(lambda: b_call not in live_ids(), 15), live_ids()
    assert dash.get(f"/api/v1/calls/{b_call}").json()["call"]["state"] == "ended"
    b_ends = [e for e in _events(client, keys) if e.call_id == b_call and e.event == "ended"]
    assert [e.reason for e in b_ends] == ["node_lost"]
    assert client.hget(keys.call(b_call), "reaped") == b"node_lost"
    b_alerts = [a for a in _alerts(client, keys) if a.call_id == b_call]
    assert b_alerts[-1].revision == b_last + 1 and b_alerts[-1].call_state.value == "ended"
    assert client.hget(keys.call(a_call), "reaped") is None  # node-a alive: not reaped

    # node-a's call goes on and ends by its BYE; its alert gets the final revision
    assert wait_for(lambda: calls["a-long"].p.poll() is not None, 20), calls["a-long"].tail()
    assert calls["a-long"].p.returncode == 0, calls["a-long"].tail()
    assert wait_for(
        lambda: any(e.call_id == a_call and e.event == "ended" for e in _events(client, keys)), 10
    )
    a_end = [e for e in _events(client, keys) if e.call_id == a_call and e.event == "ended"]
    assert len(a_end) == 1 and a_end[0].reason != "node_lost"  # its own end, not reaped
    a_alerts = [a for a in _alerts(client, keys) if a.call_id == a_call]
    assert a_alerts[-1].call_state.value == "ended" and len({a.alert_id for a in a_alerts}) == 1

    # every alert revision in Redis, of both nodes, delivered exactly once
    published = {event_id(a) for a in _alerts(client, keys)}
    assert wait_for(lambda: set(receiver.first) == published, 10), (published, receiver.first)
    assert receiver.duplicates == 0 and receiver.bad_signatures == 0
    assert {p["data"]["node_id"] for p in receiver.first.values()} == {"node-a", "node-b"}

    # after it all: no call of either node is live, node-b's call was ended once
    assert not {a_call, b_call} & live_ids()
    b_ends = [e for e in _events(client, keys) if e.call_id == b_call and e.event == "ended"]
    assert [e.reason for e in b_ends] == ["node_lost"]
    assert node_a.ready()  # the survivor is unaffected
