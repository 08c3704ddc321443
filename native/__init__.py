"""The native media core (C, bound with cffi): RTP parsing, G.711, jitter buffer, ingest.

The compiled module ``native._cs_native`` is built by ``pip install -e .`` (setup.py's
cffi_modules). This package is a leaf: it imports nothing else from CallShield.
"""

from __future__ import annotations

from typing import Any

try:
    from native._cs_native import ffi as _ffi
    from native._cs_native import lib as _lib
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        f"CallShield's native core is missing or out of date ({exc}). Rebuild it with "
        "`.ci/install.sh` or `pip install -e '.[dev]'` from the project root (cffi compiles "
        "native/src/*.c; needs gcc and the Python headers)."
    ) from exc

ffi: Any = _ffi
lib: Any = _lib

__all__ = ["ffi", "lib"]
