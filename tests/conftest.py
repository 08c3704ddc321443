"""Fixtures shared by the whole suite: where the repository and the shared data live."""

from __future__ import annotations

import os
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
