"""RTP ingest: a C receiver thread feeding per-leg jitter buffers, pulled in one batch.

``Ingest`` wraps ``native/src/ingest.h``. The C thread waits in epoll on every stream's
UDP socket, drains ready sockets with ``recvmmsg``, stamps each datagram with the
kernel's receive time (``SO_TIMESTAMPNS``, converted to ``time.monotonic_ns()``'s clock),
parses the RTP header, applies the per-stream source lock (RTP Bleed) and inserts into
the stream's jitter buffer. Python never sees a packet: it calls :meth:`Ingest.pull_all`
on its 20 ms clock and gets numpy views of one preallocated PCM array and one
frame-info array, for every stream at once.

Sockets: :meth:`Ingest.add_stream` takes a bound UDP socket (or a port to bind) that
the leg owns. :meth:`Ingest.add_socket` adds a shared socket and
:meth:`Ingest.add_stream_shared` a leg on it: many legs on one port, told apart in C by
the datagram's source address (expected from SDP or learned by the source lock) and
SSRC, which is what lets one ``recvmmsg`` read many datagrams (rule: native/src/
ingest.h). The C side keeps its own duplicate of each descriptor and closes it on
removal, so the caller's socket may be closed at any time; the port stays bound until
the stream or socket is removed. This wrapper is meant for one controlling thread
(add/remove/pull); the C calls release the GIL and lock per stream.

Receive backends (``backend=``, chosen at runtime): ``"io_uring"`` (native/src/
ingest_uring.c: one multishot recvmsg per socket drawing from a provided-buffer ring, the
datagrams of every leg reaped from one completion queue, one ``io_uring_enter`` per
batch), ``"epoll"`` (epoll + recvmmsg per ready socket), or ``"auto"`` (the default:
io_uring when its setup works here, else epoll). The choice and its reason are logged
and returned by :meth:`Ingest.backend`; a refused io_uring falls back to epoll.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, Unpack

import numpy as np
import numpy.typing as npt

from native import ffi, lib
from native.ingest_types import (
    DEFAULT_PAYLOAD_TYPES,
    FRAME_INFO_DTYPE,
    LatencyHistogram,
    LegConfig,
    LegOptions,
    PayloadType,
    addr_text,
    by_error_name,
    fill_addr,
    frame_flag_name,
    histogram_of,
    to_python,
    upper_edges,
)
from native.jitter import JitterConfig
from native.srtp import suite_code

log = logging.getLogger(__name__)
BACKENDS = {"auto": 0, "epoll": 1, "io_uring": 2}
_BACKEND_NAMES = {1: "epoll", 2: "io_uring"}

__all__ = [
    "BACKENDS",
    "DEFAULT_PAYLOAD_TYPES",
    "FRAME_INFO_DTYPE",
    "Ingest",
    "IngestError",
    "LatencyHistogram",
    "LegConfig",
    "PayloadType",
    "PulledFrames",
    "frame_flag_name",
]


class IngestError(OSError):
    """A C ingest call failed; ``errno`` holds the error number it returned."""


def _check(rc: int, what: str) -> int:
    if rc < 0:
        name = errno.errorcode.get(-rc, str(-rc))
        raise IngestError(-rc, f"{what}: {name} ({os.strerror(-rc)})")
    return rc


@dataclass(frozen=True, slots=True)
class PulledFrames:
    """One batch pull. Arrays are views into buffers reused by the next pull.

    ``pcm[i, :infos["samples"][i]]`` is stream ``ids[i]``'s 20 ms frame; ``infos`` has the
    fields of ``cs_frame_info`` (flag, real_mask, samples, concealed_samples, ...).
    """

    ids: npt.NDArray[np.int32]
    pcm: npt.NDArray[np.int16]
    infos: npt.NDArray[np.void]


class Ingest:
    """The RTP receive thread and its streams; a context manager (start/stop)."""

    def __init__(
        self,
        max_streams: int = 1024,
        *,
        rcvbuf_bytes: int = 4 << 20,
        batch: int = 16,
        max_batches: int = 8,
        max_datagram: int = 2048,
        coalesce_us: int = 0,
        coalesce_min: int = 16,
        max_sockets: int = 16,
        cpu: int | None = None,
        max_frame_samples: int = 960,
        rt_priority: int = 0,
        backend: str = "auto",
        uring_buffers: int = 0,
        uring_setup: int = 0,
        uring_refuse: int = 0,
        discard: bool = False,
    ) -> None:
        """coalesce_us > 0 caps the receiver's wakeups at ~1e6/coalesce_us per second
        while at least coalesce_min datagrams are expected per coalesce_us (0: always):
        less CPU per packet under load, up to that much more arrival latency. cpu pins
        the receiver thread to one CPU. rt_priority 1..99 runs it SCHED_FIFO (needs
        CAP_SYS_NICE; refused: it runs normally, see sched()). backend: "auto",
        "epoll" or "io_uring" (see the module doc); uring_buffers: the io_uring
        provided-buffer count (power of two; 0: 1024); uring_setup: IORING_SETUP_* flags
        (0: SINGLE_ISSUER | DEFER_TASKRUN); uring_refuse: an errno to fail the io_uring
        setup with (tests of the fallback); discard: receive and count every datagram,
        then drop it (the kernel-receive floor ``bench ingest`` measures; never in the
        bridge)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {sorted(BACKENDS)}, not {backend!r}")
        cfg = ffi.new("cs_ingest_config *")
        lib.cs_ingest_default_config(cfg)
        cfg.max_streams, cfg.rcvbuf_bytes = max_streams, rcvbuf_bytes
        cfg.batch, cfg.max_batches, cfg.max_datagram = batch, max_batches, max_datagram
        cfg.coalesce_us, cfg.coalesce_min = coalesce_us, coalesce_min
        cfg.max_sockets = max_sockets
        cfg.cpu = -1 if cpu is None else cpu
        cfg.rt_priority = rt_priority
        cfg.backend = BACKENDS[backend]
        cfg.uring_buffers, cfg.uring_setup = uring_buffers, uring_setup
        cfg.uring_refuse = uring_refuse
        cfg.discard = int(discard)
        ptr = lib.cs_ingest_new(cfg)
        if ptr == ffi.NULL:
            raise ValueError(
                f"cs_ingest_new rejected the configuration (max_streams={max_streams})"
            )
        self._ing: Any = ffi.gc(ptr, lib.cs_ingest_free)
        self._max_streams = max_streams
        self._pcm = np.zeros(max_streams * max_frame_samples, dtype=np.int16)
        self._infos = np.zeros(max_streams, dtype=FRAME_INFO_DTYPE)
        self._ids = np.zeros(max_streams, dtype=np.int32)
        self._frame_samples: dict[int, int] = {}  # stream id -> samples per frame
        self._local: dict[int, tuple[str, int]] = {}  # stream id -> bound address
        self._socket_local: dict[int, tuple[str, int]] = {}  # socket id -> bound address
        self._n = 0
        self._stride = 0
        self._max_frame_samples = max_frame_samples
        self._c_pcm = ffi.from_buffer("int16_t[]", self._pcm)
        self._c_infos = ffi.cast("cs_frame_info *", ffi.from_buffer(self._infos))
        self._c_ids = ffi.from_buffer("int32_t[]", self._ids)
        self._jb_stats = ffi.new("cs_jb_stats *")
        self._stream_counters = ffi.new("cs_stream_counters *")
        self._socket_counters = ffi.new("cs_socket_counters *")
        self._counters = ffi.new("cs_ingest_counters *")
        self._latency = ffi.new("cs_ingest_latency *")
        self._dtmf = ffi.new("cs_dtmf_event[16]")
        self._latency_edges = upper_edges()
        self._pulled = PulledFrames(self._ids[:0], self._pcm[:0].reshape(0, 0), self._infos[:0])
        self._asked = backend
        self._pacing = {"coalesce_us": coalesce_us, "coalesce_min": coalesce_min}
        self._log_backend("RTP ingest receive backend")

    # ---- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        before = self.backend()[0]
        _check(lib.cs_ingest_start(self._live()), "cs_ingest_start")
        if self.backend()[0] != before:
            self._log_backend("RTP ingest receive backend changed at start")

    def backend(self) -> tuple[str, str]:
        """The receive backend in use ("io_uring" or "epoll") and why it was chosen."""
        reason = ffi.new("char[256]")
        code = lib.cs_ingest_backend(self._live(), reason, 256)
        return _BACKEND_NAMES.get(int(code), str(code)), ffi.string(reason).decode()

    def pacing(self) -> dict[str, int]:
        """The receive pacing this ingest was built with (coalesce_us 0: off)."""
        return dict(self._pacing)

    def _log_backend(self, what: str) -> None:
        name, reason = self.backend()
        refused = self._asked == "io_uring" and name != "io_uring"
        pacing = (
            "pacing: off (coalesce_us 0)"
            if not self._pacing["coalesce_us"]
            else "pacing: coalesce_us {coalesce_us}, while >= {coalesce_min} datagrams "
            "are expected per sleep".format(**self._pacing)
        )
        log.log(
            logging.WARNING if refused else logging.INFO,
            "%s: %s (asked: %s; %s; %s)",
            what,
            name,
            self._asked,
            reason,
            pacing,
        )

    def stop(self) -> None:
        lib.cs_ingest_stop(self._live())

    def close(self) -> None:
        """Stop the thread, free every stream and close the C side's descriptors."""
        if self._ing is not None:
            lib.cs_ingest_stop(self._ing)
            ffi.release(self._ing)
            self._ing = None
            self._frame_samples.clear()
            self._local.clear()
            self._socket_local.clear()
            self._rebuild_ids()

    def _live(self) -> Any:
        if self._ing is None:
            raise RuntimeError("this Ingest is closed")
        return self._ing

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- streams -----------------------------------------------------------------

    def add_stream(
        self,
        sock: socket.socket | int,
        *,
        host: str = "127.0.0.1",
        expected_source: tuple[str, int] | None = None,
        **leg: Unpack[LegOptions],
    ) -> int:
        """Add a leg on its own socket; returns its stream id. ``sock``: a bound UDP
        socket or a port to bind. ``leg``: the fields of :class:`LegConfig`."""
        cfg = LegConfig(**leg)
        jb, lock = cfg.jb_config(), cfg.lock_config()
        own = isinstance(sock, int)
        s = _bind_udp(host, sock) if isinstance(sock, int) else sock
        try:
            sid = _check(lib.cs_ingest_add_stream(self._live(), s.fileno(), jb, lock), "add_stream")
            self._local[sid] = s.getsockname()[:2]
        finally:
            if own:
                s.close()  # the C side holds its own duplicate
        self._register(sid, cfg)
        if expected_source is not None:
            self.expect_source(sid, *expected_source)
        return int(sid)

    def add_socket(self, sock: socket.socket | int, *, host: str = "127.0.0.1") -> int:
        """Add a shared socket that many legs receive on; returns its socket id (not a
        stream id). ``sock``: a bound UDP socket or a port to bind."""
        own = isinstance(sock, int)
        s = _bind_udp(host, sock) if isinstance(sock, int) else sock
        try:
            kid = _check(lib.cs_ingest_add_socket(self._live(), s.fileno()), "add_socket")
            self._socket_local[kid] = s.getsockname()[:2]
        finally:
            if own:
                s.close()
        return int(kid)

    def remove_socket(self, socket_id: int) -> None:
        """Close a shared socket; its legs must have been removed first (EBUSY)."""
        _check(lib.cs_ingest_remove_socket(self._live(), socket_id), "remove_socket")
        self._socket_local.pop(socket_id, None)

    def add_stream_shared(
        self,
        socket_id: int,
        *,
        expected_source: tuple[str, int] | None = None,
        ssrc: int | None = None,
        **leg: Unpack[LegOptions],
    ) -> int:
        """Add a leg on a shared socket; returns its stream id.

        Datagrams reach it by source (see native/src/ingest.h): from ``expected_source``
        (host, port) when given with a port, told apart by ``ssrc`` from other legs with
        the same source; otherwise it learns its source from the first packets carrying
        ``ssrc``. One of the two is required. ``leg``: the fields of :class:`LegConfig`.
        """
        cfg = LegConfig(**leg)
        jb, lock = cfg.jb_config(), cfg.lock_config()
        addr = ffi.NULL
        if expected_source is not None:
            addr = ffi.new("cs_srclock_addr *")
            fill_addr(addr, *expected_source)
        sid = _check(
            lib.cs_ingest_add_stream_shared(self._live(), socket_id, addr, ssrc or 0, jb, lock),
            "add_stream_shared",
        )
        self._local[sid] = self._socket_local[socket_id]
        self._register(sid, cfg)
        return int(sid)

    def add_stream_push(self, **leg: Unpack[LegOptions]) -> int:
        """Add a leg without a socket: an adapter hands its packets in with :meth:`push`
        or :meth:`push_payload` (WebRTC after SRTP, media WebSockets, AudioSocket).
        Pulled, counted and removed like any other stream; no source lock."""
        cfg = LegConfig(**leg)
        sid = _check(lib.cs_ingest_add_stream_push(self._live(), cfg.jb_config()), "add_push")
        self._register(sid, cfg)
        return int(sid)

    def push(self, stream_id: int, datagram: bytes, arrival_ns: int) -> int:
        """Insert one RTP datagram into a pushed stream (thread-safe, no Python lock).
        Returns the jitter buffer's outcome code (``native.jitter.PacketOutcome``), 0 when
        the datagram is not RTP (counted). Raises IngestError(ENOENT) for a stream that is
        gone or not a pushed one."""
        return _check(
            lib.cs_ingest_push(self._live(), stream_id, datagram, len(datagram), arrival_ns),
            "push",
        )

    def push_payload(
        self,
        stream_id: int,
        payload_type: int,
        seq: int,
        ts: int,
        ssrc: int,
        payload: bytes | memoryview,
        arrival_ns: int,
        *,
        marker: bool = False,
    ) -> int:
        """Insert a payload with its RTP header fields given directly, for transports
        that carry no RTP (timestamps from the stream's own sample counters)."""
        buf = ffi.from_buffer(payload)
        return _check(
            lib.cs_ingest_push_payload(
                self._live(),
                stream_id,
                payload_type,
                seq & 0xFFFF,
                ts & 0xFFFFFFFF,
                ssrc & 0xFFFFFFFF,
                int(marker),
                buf,
                len(buf),
                arrival_ns,
            ),
            "push_payload",
        )

    def push_event(
        self,
        stream_id: int,
        payload: bytes,
        ts: int,
        arrival_ns: int,
        *,
        clock_rate: int = 8000,
    ) -> int:
        """A telephone-event payload (RFC 4733) for a transport that reports digits as
        text: to the leg's DTMF tracker, outside the sequence state of its audio."""
        return _check(
            lib.cs_ingest_push_event(
                self._live(),
                stream_id,
                payload,
                len(payload),
                ts & 0xFFFFFFFF,
                clock_rate,
                arrival_ns,
            ),
            "push_event",
        )

    def _register(self, sid: int, cfg: LegConfig) -> None:
        spf = cfg.out_rate // 50
        if spf > self._max_frame_samples:
            lib.cs_ingest_remove_stream(self._live(), sid)
            self._local.pop(sid, None)
            raise ValueError(f"out_rate {cfg.out_rate} exceeds max_frame_samples")
        self._frame_samples[sid] = spf
        self._rebuild_ids()

    def remove_stream(self, stream_id: int) -> None:
        """Remove a leg; afterwards the receiver never touches its socket again."""
        self._frame_samples.pop(stream_id, None)
        self._local.pop(stream_id, None)
        self._rebuild_ids()
        _check(lib.cs_ingest_remove_stream(self._live(), stream_id), "remove_stream")

    def rearm(self, stream_id: int, now_ns: int) -> None:
        """Signalling moved the media: relearn the source (with probation)."""
        _check(lib.cs_ingest_rearm(self._live(), stream_id, now_ns), "rearm")

    def expect_source(self, stream_id: int, host: str, port: int = 0) -> None:
        """Only learn a source from host (and port, unless 0), e.g. from the SDP c=/m=."""
        addr = ffi.new("cs_srclock_addr *")
        fill_addr(addr, host, port)
        _check(lib.cs_ingest_expect_source(self._live(), stream_id, addr), "expect_source")

    def set_ssrc(self, stream_id: int, ssrc: int) -> None:
        """A shared leg's SSRC from new signalling (0: none), re-keyed in place: stream,
        SRTP state and counters kept (IngestError EEXIST: another leg holds the key)."""
        _check(lib.cs_ingest_set_ssrc(self._live(), stream_id, ssrc), "set_ssrc")

    def set_payload_types(self, stream_id: int, payload_types: Sequence[PayloadType]) -> None:
        """A leg's payload-type table from new signalling, replaced in place
        (cs_ingest_set_pts): stream, counters, sequence state, buffered audio and SRTP
        state kept. IngestError EOPNOTSUPP: the buffer was not built for the table (more
        ring bytes per unit, a resampler or Opus it lacks), EBUSY: audio is buffered under
        a codec the table drops, EINVAL: a bad table; nothing changed on any."""
        table = JitterConfig(payload_types=tuple(payload_types)).to_c()
        _check(lib.cs_ingest_set_pts(self._live(), stream_id, table.pts, table.n_pts), "set_pts")

    def set_paused(self, stream_id: int, paused: bool) -> None:
        _check(lib.cs_ingest_set_paused(self._live(), stream_id, int(paused)), "set_paused")

    def set_srtp(
        self, stream_id: int, suite: str | None, key_salt: bytes = b"", mki: bytes = b""
    ) -> bool:
        """SDES-keyed SRTP on a socket leg (``suite`` an a=crypto suite name, key_salt
        the inline key's bytes), or plain RTP again (``suite`` None). Every datagram is
        then authenticated, replay-checked and decrypted in C before it is parsed;
        failures count in stream_counters (srtp_auth_failed, srtp_replayed, ...).
        Returns True when a new key was installed, False for the same key again (its
        ROC and replay window kept) or SRTP off. ValueError for a bad suite or key."""
        code = 0 if suite is None else suite_code(suite)
        rc = lib.cs_ingest_set_srtp(
            self._live(), stream_id, code, key_salt, len(key_salt), mki or ffi.NULL, len(mki)
        )
        if rc == -errno.EINVAL:
            raise ValueError(f"bad SRTP key for {suite}: {len(key_salt)} bytes")
        return _check(rc, "set_srtp") == 1

    def local_address(self, stream_id: int) -> tuple[str, int]:
        """(host, port) the stream's socket is bound to (where to send its RTP)."""
        return self._local[stream_id]

    def socket_address(self, socket_id: int) -> tuple[str, int]:
        """(host, port) a shared socket is bound to."""
        return self._socket_local[socket_id]

    def take_dtmf(self, stream_id: int) -> list[dict[str, int]]:
        """Finished or updated RFC 4733 events (keyed tokens, never digits)."""
        n = _check(lib.cs_ingest_take_dtmf(self._live(), stream_id, self._dtmf, 16), "take_dtmf")
        return [to_python(self._dtmf[i]) for i in range(n)]

    @property
    def stream_ids(self) -> npt.NDArray[np.int32]:
        return self._ids[: self._n]

    def _rebuild_ids(self) -> None:
        ids = sorted(self._frame_samples)
        n = self._n = len(ids)
        self._ids[:n] = ids
        stride = self._stride = max(self._frame_samples.values(), default=0)
        self._pulled = PulledFrames(
            self._ids[:n], self._pcm[: n * stride].reshape(n, stride), self._infos[:n]
        )

    # ---- the batch pull --------------------------------------------------------------

    def pull_all(self, now_ns: int) -> PulledFrames:
        """One 20 ms frame of every stream, in one C call (no per-frame Python objects).

        Returns the same PulledFrames (views of preallocated arrays) every time, until a
        stream is added or removed; copy what must outlive the next pull."""
        if self._n:
            lib.cs_ingest_pull(
                self._live(),
                now_ns,
                self._c_ids,
                self._n,
                self._c_pcm,
                self._stride,
                self._c_infos,
            )
        return self._pulled

    # ---- stats ---------------------------------------------------------------------

    def stream_stats(self, stream_id: int) -> dict[str, Any]:
        """The jitter buffer's cs_jb_stats as a dict (wait_hist as a list)."""
        _check(lib.cs_ingest_stream_stats(self._live(), stream_id, self._jb_stats), "stats")
        result: dict[str, Any] = to_python(self._jb_stats[0])
        return result

    def stream_counters(self, stream_id: int) -> dict[str, Any]:
        """Receive-side counters of one stream, parse errors and outcomes by name."""
        c = self._stream_counters
        _check(lib.cs_ingest_stream_counters(self._live(), stream_id, c), "stream_counters")
        out: dict[str, Any] = to_python(c[0])
        out["parse_errors"] = by_error_name(out["parse_errors"])
        out["locked_addr"] = addr_text(c.locked_addr)
        return out

    def socket_counters(self, socket_id: int) -> dict[str, Any]:
        """Counters of one shared socket (datagrams, unmatched, parse errors by reason)."""
        c = self._socket_counters
        _check(lib.cs_ingest_socket_counters(self._live(), socket_id, c), "socket_counters")
        out: dict[str, Any] = to_python(c[0])
        out["parse_errors"] = by_error_name(out["parse_errors"])
        return out

    def sched(self) -> int:
        """The receiver thread: 1 SCHED_FIFO, 0 normal scheduling, -errno: the asked-for
        real-time priority was refused (it runs normally)."""
        return int(lib.cs_ingest_sched(self._live()))

    def counters(self) -> dict[str, Any]:
        """Receiver-wide counters; parse_errors keyed by reason."""
        lib.cs_ingest_get_counters(self._live(), self._counters)
        out: dict[str, Any] = to_python(self._counters[0])
        out["parse_errors"] = by_error_name(out["parse_errors"])
        return out

    def latency(self) -> LatencyHistogram:
        """Kernel receive timestamp -> after the jitter-buffer insert (socket-queue wait,
        thread wake-up and coalescing included)."""
        lib.cs_ingest_get_latency(self._live(), self._latency)
        return self._histogram()

    def processing(self) -> LatencyHistogram:
        """recvmmsg returned -> after the jitter-buffer insert (the C code's own time)."""
        lib.cs_ingest_get_processing(self._live(), self._latency)
        return self._histogram()

    def _histogram(self) -> LatencyHistogram:
        return histogram_of(self._latency, self._latency_edges)

    def thread_cpu_ns(self) -> int:
        """CPU time used by the receiver thread(s) so far."""
        return int(lib.cs_ingest_thread_cpu_ns(self._live()))


def udp_socket(host: str) -> socket.socket:
    """A non-blocking UDP socket of ``host``'s family, to bind on ``host``.

    An IPv6 socket sets IPV6_V6ONLY itself instead of taking the host's
    ``net.ipv6.bindv6only`` default: off (dual-stack) for the wildcard ``::`` and an
    IPv4-mapped address, so one socket receives IPv6 peers and IPv4 peers alike (an IPv4
    peer arrives as ::ffff:a.b.c.d, which C keys as IPv4: cs_srclock_addr, so it matches
    an expected source from an ``IN IP4`` c= line); on (IPv6 only) for any other IPv6
    address, which cannot receive IPv4 anyway."""
    if ":" not in host:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    else:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack(host) else 1)
        except OSError:
            s.close()
            raise
    s.setblocking(False)
    return s


def dual_stack(host: str) -> bool:
    """Whether a socket bound on ``host`` by :func:`udp_socket` receives both families."""
    if ":" not in host:
        return False
    raw = socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0])
    return raw == bytes(16) or raw[:12] == bytes(10) + b"\xff\xff"


def _bind_udp(host: str, port: int) -> socket.socket:
    s = udp_socket(host)
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        raise
    return s
