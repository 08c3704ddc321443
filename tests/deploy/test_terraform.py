"""deploy/terraform checked by the real tool, offline: ``terraform fmt -check``,
``terraform init`` against the local provider mirror, ``terraform validate`` of the
multi-region root and of modules/region, and ``terraform test`` (mocked AWS provider:
the structural facts live in the ``*.tftest.hcl`` files: one auto-scaling group per AZ
with the LAUNCHING/TERMINATING hooks, NLB listeners and /ready health checks, RTP on the
nodes' security group and not the NLB, ElastiCache TLS + at rest + AUTH from Secrets
Manager, one latency record per region, variable validation). The launch template's user
data is rendered by ``terraform console`` and checked by ``shellcheck``.

A plain ``terraform plan`` cannot run here: the data sources (the VPC, the AUTH token
secret) need AWS credentials, so ``terraform test``'s mock provider takes its place.

Terraform 1.11 (/usr/local/bin/terraform) and the hashicorp/aws provider mirror
(/opt/tf-plugins) cannot be downloaded by .ci/install.sh (no registry reachable): where
they are absent the tests skip with that reason (and fail under CI, which must have them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TF_DIR = REPO / "deploy" / "terraform"
PLUGINS = Path("/opt/tf-plugins")
TERRAFORM = shutil.which("terraform") or "/usr/local/bin/terraform"
ENV = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "NO_COLOR": "1"}

USER_DATA = (
    'templatefile("user_data.sh.tftpl", {{region="eu-west-1", '
    'image="111111111111.dkr.ecr.eu-west-1.amazonaws.com/callshield:1-gpu", '
    'launch_hook="cs-prewarmed", terminate_hook="cs-drained", redis_host="r.example", '
    'redis_secret_arn="arn:aws:secretsmanager:eu-west-1:111111111111:secret:r", '
    'tls_secret_arn="{tls}", rtp_ports="20000-20999", http_port=9464, '
    "drain_timeout_s=3600, prewarm_timeout_s=900}})"
)


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    if not Path(TERRAFORM).exists() or not PLUGINS.is_dir():
        pytest.skip(
            "terraform (/usr/local/bin/terraform) or the AWS provider mirror (/opt/tf-plugins) "
            "is absent; neither can be downloaded here, so .ci/install.sh does not install them"
        )


def _tf(cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TERRAFORM, *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The root and the region module, each copied and ``terraform init``-ed offline."""
    out: dict[str, Path] = {}
    for name, src in (("root", TF_DIR), ("region", TF_DIR / "modules" / "region")):
        dst = tmp_path_factory.mktemp(f"tf-{name}") / name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
        result = _tf(dst, "init", "-backend=false", f"-plugin-dir={PLUGINS}", "-input=false")
        assert result.returncode == 0, result.stdout + result.stderr
        out[name] = dst
    yield out


def test_terraform_fmt_check() -> None:
    result = _tf(TF_DIR, "fmt", "-check", "-recursive", "-diff")
    hint = "run `terraform fmt -recursive deploy/terraform`"
    assert result.returncode == 0, f"{hint}:\n{result.stdout}"


@pytest.mark.parametrize("which", ["root", "region"])
def test_terraform_validate(initialised: dict[str, Path], which: str) -> None:
    result = _tf(initialised[which], "validate", "-json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"valid": true' in result.stdout


@pytest.mark.parametrize("which", ["root", "region"])
def test_terraform_test_with_mocked_aws(initialised: dict[str, Path], which: str) -> None:
    result = _tf(initialised[which], "test", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 failed" in result.stdout
    assert "Success!" in result.stdout


@pytest.mark.parametrize("tls", ["arn:aws:secretsmanager:eu-west-1:111111111111:secret:t", ""])
def test_user_data_renders_and_passes_shellcheck(
    initialised: dict[str, Path], tls: str, tmp_path: Path
) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        message = "shellcheck not installed (.ci/install.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    module = initialised["region"]
    rendered = subprocess.run(
        [TERRAFORM, "console"],
        cwd=module,
        env=ENV,
        input=USER_DATA.format(tls=tls),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    lines = rendered.stdout.strip().splitlines()
    assert lines[0] == "<<EOT" and lines[-1] == "EOT", rendered.stdout[:200]
    script = tmp_path / "user_data.sh"
    script.write_text("\n".join(lines[1:-1]) + "\n")
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert f"TLS_SECRET_ARN='{tls}'" in text
    assert '--advertised-address "$PUBLIC_IP"' in text
    checked = subprocess.run(
        [shellcheck, "-s", "bash", str(script)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout
