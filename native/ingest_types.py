"""numpy and plain-Python views of the C structs the RTP ingest exposes (native/src/
ingest.h, jb.h, srclock.h): structured dtypes laid out from cffi's offsets, the latency
histogram, struct-to-dict conversion, address helpers, and the per-leg configuration
(payload types, jitter-buffer and source-lock settings). Used by native.ingest."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from native import ffi, lib
from native.jitter import DEFAULT_PAYLOAD_TYPES, JitterConfig, PayloadType

__all__ = [
    "DEFAULT_PAYLOAD_TYPES",
    "FRAME_INFO_DTYPE",
    "LatencyHistogram",
    "LegConfig",
    "LegOptions",
    "PayloadType",
    "addr_text",
    "by_error_name",
    "fill_addr",
    "frame_flag_name",
    "histogram_of",
    "to_python",
    "upper_edges",
]

_FLAG_NAMES = {
    lib.CS_FRAME_NOT_STARTED: "not_started",
    lib.CS_FRAME_NORMAL: "normal",
    lib.CS_FRAME_CONCEALED: "concealed",
    lib.CS_FRAME_CNG: "cng",
    lib.CS_FRAME_PAUSED: "paused",
}
_NUMPY_OF_C = {
    "int8_t": "i1",
    "uint8_t": "u1",
    "int16_t": "i2",
    "uint16_t": "u2",
    "int32_t": "i4",
    "uint32_t": "u4",
    "int64_t": "i8",
    "uint64_t": "u8",
}


def _struct_dtype(ctype: str) -> np.dtype[np.void]:
    """A numpy structured dtype laid out exactly like the C struct (offsets from cffi)."""
    ct = ffi.typeof(ctype)
    names, formats, offsets = [], [], []
    for name, field in ct.fields:
        names.append(name)
        formats.append(_NUMPY_OF_C[field.type.cname])
        offsets.append(field.offset)
    spec = {"names": names, "formats": formats, "offsets": offsets, "itemsize": ffi.sizeof(ct)}
    return np.dtype(spec)  # type: ignore[call-overload, no-any-return]


FRAME_INFO_DTYPE = _struct_dtype("cs_frame_info")
_RTP_ERRORS = [ffi.string(lib.cs_rtp_error_name(i)).decode() for i in range(lib.CS_RTP_ERR_COUNT)]


def frame_flag_name(flag: int) -> str:
    """snake_case name of a CS_FRAME_* flag."""
    return _FLAG_NAMES.get(flag, "unknown")


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """A latency histogram copied out of C (cs_ingest_latency), in fixed buckets.

    ``upper_ns[i]`` is the exclusive upper edge of ``counts[i]`` (1 µs buckets to 1 ms,
    then powers of two in ms; the last bucket is unbounded).
    """

    counts: npt.NDArray[np.uint64]
    upper_ns: npt.NDArray[np.float64]
    count: int
    sum_ns: int
    max_ns: int
    negative: int

    def percentile_ns(self, q: float) -> float:
        """Upper edge of the bucket holding the q-th percentile (0 < q <= 100)."""
        if self.count == 0:
            return float("nan")
        rank = q / 100.0 * self.count
        idx = int(np.searchsorted(np.cumsum(self.counts), rank, side="left"))
        return float(min(self.upper_ns[min(idx, self.upper_ns.size - 1)], self.max_ns))


def histogram_of(h: Any, edges: npt.NDArray[np.float64] | None = None) -> LatencyHistogram:
    """A copy of a ``cs_ingest_latency *`` (``edges``: ``upper_edges()``, reusable)."""
    counts = np.concatenate(
        [
            np.frombuffer(ffi.buffer(h.fine), dtype=np.uint64).copy(),
            np.frombuffer(ffi.buffer(h.tail), dtype=np.uint64).copy(),
        ]
    )
    return LatencyHistogram(
        counts,
        upper_edges() if edges is None else edges,
        int(h.count),
        int(h.sum_ns),
        int(h.max_ns),
        int(h.negative),
    )


def upper_edges() -> npt.NDArray[np.float64]:
    """Exclusive upper edges (ns) of cs_ingest_latency's fine + tail buckets."""
    fine = np.arange(1, 1001, dtype=np.float64) * 1e3
    tail = np.array([2.0 ** (k + 1) * 1e6 for k in range(11)] + [np.inf])
    return np.concatenate([fine, tail])


def to_python(value: Any) -> Any:
    """A cffi struct/array/int as plain Python (dict/list/int)."""
    if isinstance(value, int):
        return value
    ct = ffi.typeof(value)
    if ct.kind == "struct":
        return {name: to_python(getattr(value, name)) for name, _ in ct.fields}
    if ct.kind == "array":
        return [to_python(v) for v in value]
    return value


def fill_addr(addr: Any, host: str, port: int) -> None:
    """Fill a cs_srclock_addr (IPv4-mapped IPv6 becomes family 4, as in C)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    raw = socket.inet_pton(family, host)
    if family == socket.AF_INET6 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    addr.family = 4 if len(raw) == 4 else 6
    addr.port = port
    ffi.memmove(addr.addr, raw, len(raw))


def by_error_name(values: Sequence[int]) -> dict[str, int]:
    """parse_errors[] indexed by CS_RTP_ERR_* as {reason: count}."""
    return {name: int(values[i]) for i, name in enumerate(_RTP_ERRORS) if i > 0}


def addr_text(addr: Any) -> tuple[str, int] | None:
    """A cs_srclock_addr as (host, port); None when unset."""
    if addr.family == 4:
        return socket.inet_ntop(socket.AF_INET, bytes(addr.addr)[:4]), int(addr.port)
    if addr.family == 6:
        return socket.inet_ntop(socket.AF_INET6, bytes(addr.addr)), int(addr.port)
    return None


class LegOptions(TypedDict, total=False):
    """Keyword arguments of Ingest.add_stream / add_stream_shared: LegConfig's fields."""

    payload_types: Sequence[PayloadType]
    out_rate: int
    min_delay_ms: int | None
    max_delay_ms: int | None
    start_delay_ms: int | None
    capacity_ms: int | None
    probation: int
    ssrc_quiet_ms: float


@dataclass(frozen=True, slots=True)
class LegConfig:
    """A leg's jitter-buffer and source-lock settings (None: the C default)."""

    payload_types: Sequence[PayloadType] = DEFAULT_PAYLOAD_TYPES
    out_rate: int = 8000
    min_delay_ms: int | None = None
    max_delay_ms: int | None = None
    start_delay_ms: int | None = None
    capacity_ms: int | None = None
    probation: int = 2
    ssrc_quiet_ms: float = 80.0

    def jb_config(self) -> Any:
        """A filled cs_jb_config * (cffi-owned), with a fresh per-call DTMF key."""
        delays = {
            name: getattr(self, name)
            for name in ("capacity_ms", "min_delay_ms", "max_delay_ms", "start_delay_ms")
            if getattr(self, name) is not None
        }
        config = JitterConfig(
            out_rate=self.out_rate, payload_types=tuple(self.payload_types), **delays
        )
        return config.to_c()

    def lock_config(self) -> Any:
        """A filled cs_srclock_config * (cffi-owned)."""
        lock = ffi.new("cs_srclock_config *")
        lib.cs_srclock_default_config(lock)
        lock.probation = self.probation
        lock.ssrc_quiet_ns = int(self.ssrc_quiet_ms * 1e6)
        return lock
