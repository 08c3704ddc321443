"""The `callshield` command loads only what the chosen subcommand needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sip_bridge.cli import _COMMANDS, build_parser


def test_a_light_command_does_not_load_the_media_or_model_stack() -> None:
    code = (
        "import sys; from sip_bridge.cli import build_parser; build_parser(['schema']); "
        "heavy = [m for m in ('numpy', 'onnxruntime', 'native', 'fastapi') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser(["--help"]).parse_args(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in _COMMANDS)
