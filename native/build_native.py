"""cffi (API mode, out of line) builder for the native media core.

Every header in ``native/src`` carries the declarations Python may call between the
markers ``CDEF BEGIN`` and ``CDEF END``; this script hands exactly those parts to cffi,
so the C header stays the one source of truth for the binding.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
_CDEF_RE = re.compile(r"/\*\s*CDEF BEGIN\s*\*/(.*?)/\*\s*CDEF END\s*\*/", re.S)

# Headers in dependency order: cffi needs a type declared before it is used.
HEADERS = [
    "cs_common.h",
    "g711.h",
    "g722.h",
    "resample.h",
    "cs_opus.h",
    "rtp.h",
    "jb.h",
    "jb_bench.h",
    "srclock.h",
    "srtp_rx.h",
    "ingest.h",
    "stall_probe.h",
]


def _cdef_text() -> str:
    parts = []
    for name in HEADERS:
        path = SRC / name
        if not path.exists():
            continue
        parts.extend(m.group(1) for m in _CDEF_RE.finditer(path.read_text()))
    return "\n".join(parts)


def _sources() -> list[str]:
    return sorted(str(p.relative_to(HERE.parent)) for p in SRC.glob("*.c"))


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "native._cs_native",
    "\n".join(f'#include "{h}"' for h in HEADERS if (SRC / h).exists()),
    sources=_sources(),
    include_dirs=[str(SRC.relative_to(HERE.parent))],
    extra_compile_args=[
        "-O2",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-fno-strict-aliasing",
        *os.environ.get("CALLSHIELD_CFLAGS", "").split(),
    ],
    libraries=["pthread", "m", "opus", "crypto"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
