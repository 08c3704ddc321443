"""Fixtures of the native ingest tests: real speech, and a running Ingest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from rtp_call import load_speech

from native.ingest import Ingest


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> npt.NDArray[np.int16]:
    return load_speech(shared_dir, 12.0)


@pytest.fixture
def ingest() -> Iterator[Ingest]:
    with Ingest(64) as ing:
        yield ing
