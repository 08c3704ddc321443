"""End-to-end fixtures: the real redis-server of the bus tests, and the SIPp helpers and
speech of the SIP peer tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sip"))

from tests.bus.conftest import client, redis_server, settings

__all__ = ["client", "redis_server", "settings"]
