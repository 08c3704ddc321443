"""Fixtures shared by the whole suite: where the repository and the shared data live."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parent.parent


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
