"""Fixtures shared by the whole suite: where the repository and the shared data live."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parent.parent
# every phone number written in a test (E.164, 10-15 digits): none may reach a log line
_NUMBER = re.compile(r"\+[1-9]\d{9,14}")


def _test_numbers() -> frozenset[str]:
    found: set[str] = set()
    for path in Path(__file__).parent.rglob("*.py"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found.update(_NUMBER.findall(path.read_text()))
    return frozenset(found | {n[1:] for n in found})  # with and without the '+'


class _LogLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.leaked: list[str] = []
        self.numbers = _test_numbers()

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record that cannot be formatted cannot leak
            line = self.format(record)
            self.count += 1
            flat = re.sub(r"[ ()\-.]", "", line)
            if any(n in flat for n in self.numbers) and len(self.leaked) < 20:
                self.leaked.append(line)


@pytest.fixture(scope="session", autouse=True)
def phone_numbers_never_logged_anywhere() -> Iterator[None]:
    """Issue 8: no phone number in any log line of the whole test run. Every record that
    this process logs at INFO or above (the bridge, detectors, dashboard and bus code the
    tests run in-process, and their threads) is checked against every number the tests
    use; the dashboard tests' own scan (tests/dashboard/conftest.py) also covers DEBUG."""
    handler = _LogLines()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    if old_level > logging.INFO:  # NOTSET (0) already passes everything
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert handler.numbers, "no test phone number was found: the scan would prove nothing"
    assert not handler.leaked, f"phone numbers in log lines, e.g. {handler.leaked[:3]!r}"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root directory (the one holding pyproject.toml)."""
    return _REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir(repo_root: Path) -> Path:
    """The project's shared/ folder (speech data, models, research).

    ``$CALLSHIELD_SHARED`` if set, else ``shared/`` beside the repository (where both the
    developers' checkouts and CI's clone find it). Missing: the test is skipped, except
    under CI (``CI`` set), where a missing data folder must fail loudly, not skip.
    """
    env = os.environ.get("CALLSHIELD_SHARED")
    path = Path(env) if env else repo_root.parent / "shared"
    if not path.is_dir():
        message = f"shared data folder not found: {path} (set CALLSHIELD_SHARED)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def aasist_l_cli_import(
    tmp_path_factory: pytest.TempPathFactory, shared_dir: Path
) -> tuple[Path, str]:
    """The official AASIST-L checkpoint from shared/, imported once per run by
    ``callshield models import-aasist CKPT --out DIR`` (the CLI, in-process): the models
    directory and what the command printed. The conversion takes ~11 s, so the tests
    that need an installed real model share it (none of them writes to the folder)."""
    pytest.importorskip("torch", reason="the convert extra (torch) is not installed")
    from sip_bridge.cli import main

    ckpt = shared_dir / "models/aasist/AASIST-L.pth"
    if not ckpt.is_file():
        pytest.fail(f"{ckpt} is missing from shared/")
    models = tmp_path_factory.mktemp("aasist-l-import") / "models"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(["models", "import-aasist", str(ckpt), "--out", str(models)])
    assert rc == 0, printed.getvalue()
    return models, printed.getvalue()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI (``CI`` set) a skipped test is a failure: every skip here means a tool or
    data set that .ci/install.sh or shared/ should have provided, and a green run must
    not hide that it never ran."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI: {report.longrepr}"
