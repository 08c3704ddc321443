"""The media side of the bridge: RTP ports from a configured range, one native ingest
stream per leg, and the 20 ms playout clock that pulls every leg in one batch call and
hands the frames to a :class:`FrameSink` (detectors come in issue 5).

Threads: the ingest's C receiver thread; one playout thread (this module); the asyncio
loop (signalling), which adds, changes and removes legs. Every ``Ingest`` call goes
through one lock, so the playout thread and signalling never race on the stream table.
Freed ports are quarantined (DESIGN §8: at least twice the RTP timeout) before reuse.

A leg keyed by SDES (RTP/SAVP) carries the remote's SRTP key: its ingest stream then
authenticates and decrypts in C before parsing; the key survives a stream re-created for
a new payload-type table, and a new key (re-INVITE) re-keys the stream.

With a shared RTP port (``shared_port``) every SIP leg receives on one UDP socket and the
C demultiplexer (native/src/ingest.h) tells legs apart by the source address:port their
offer advertises (symmetric RTP, RFC 4961) and the offer's a=ssrc. A leg whose key cannot
be added (another leg already holds that source and SSRC, or the offer gives neither a
port nor an SSRC) falls back to a port of its own from the range (counted,
``shared_fallbacks``). Shared legs take no port from the range, so the quarantine does not
apply to them: a late datagram from a freed leg's source is unmatched (counted, dropped)
unless a new leg is keyed on that same source, which is then the same peer.

Legs of transports without a UDP socket of ours (WebRTC, media WebSockets, AudioSocket)
are *pushed* legs: the adapter pushes into the same kind of ingest stream, outside the
table lock (the C stream mutex orders it against the pull).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from native.ingest import Ingest, IngestError, PayloadType, PulledFrames, dual_stack, udp_socket
from native.jitter import FrameFlag
from native.srtp import SrtpKey

log = logging.getLogger(__name__)
FRAME_NS = 20_000_000
NATIVE_CODECS = frozenset({"PCMU", "PCMA", "L16", "L16LE", "G722", "opus", "CN", "telephone-event"})


class CapacityError(RuntimeError):
    """No RTP port or ingest slot is free."""


class FrameSink(Protocol):
    """Receives every 20 ms tick's frames of all legs. ``legs[i]`` owns row i of
    ``frames`` (views reused by the next tick: copy what must outlive the call)."""

    def on_frames(self, now_ns: int, legs: Sequence[str], frames: PulledFrames) -> None: ...


class PortRange:
    """Even RTP ports in [low, high] (RTCP would take the odd one above), with quarantine."""

    def __init__(self, low: int, high: int, quarantine_s: float) -> None:
        if not 0 < low <= high < 65536:
            raise ValueError(f"bad RTP port range {low}-{high}")
        first = low + (low & 1)
        self._free: deque[int] = deque(range(first, high + 1, 2))
        self._quarantine: deque[tuple[float, int]] = deque()
        self.quarantine_s = quarantine_s

    def take(self, now: float) -> int:
        while self._quarantine and self._quarantine[0][0] <= now:
            self._free.append(self._quarantine.popleft()[1])
        if not self._free:
            raise CapacityError("no free RTP port")
        return self._free.popleft()

    def give_back(self, port: int, now: float) -> None:
        self._quarantine.append((now + self.quarantine_s, port))

    @property
    def free(self) -> int:
        return len(self._free) + len(self._quarantine)


class PushedLeg:
    """Where an adapter hands one leg's packets: a pushed ingest stream (no socket).

    ``push`` takes an RTP datagram (WebRTC after SRTP); ``push_payload`` a payload whose
    header fields the adapter derives from its transport's own counters. Both return
    the jitter buffer's outcome code and are safe from any thread. Once the leg is
    closed (hang-up, RTP timeout) they return -1 and ``closed`` is true.
    """

    __slots__ = ("_ingest", "_sid", "closed", "leg_id", "payload_types")

    def __init__(
        self, ingest: Ingest, sid: int, leg_id: str, payload_types: tuple[PayloadType, ...]
    ) -> None:
        self._ingest = ingest
        self._sid = sid
        self.leg_id = leg_id
        self.payload_types = payload_types
        self.closed = False

    def push(self, datagram: bytes, arrival_ns: int) -> int:
        if self.closed:
            return -1
        try:
            return self._ingest.push(self._sid, datagram, arrival_ns)
        except IngestError:
            self.closed = True
            return -1

    def push_payload(
        self,
        payload_type: int,
        seq: int,
        ts: int,
        ssrc: int,
        payload: bytes | memoryview,
        arrival_ns: int,
        marker: bool = False,
    ) -> int:
        if self.closed:
            return -1
        try:
            return self._ingest.push_payload(
                self._sid, payload_type, seq, ts, ssrc, payload, arrival_ns, marker=marker
            )
        except IngestError:
            self.closed = True
            return -1

    def push_event(self, payload: bytes, ts: int, arrival_ns: int, clock_rate: int = 8000) -> int:
        """An RFC 4733 payload for digits the transport reported as text."""
        if self.closed:
            return -1
        try:
            return self._ingest.push_event(
                self._sid, payload, ts, arrival_ns, clock_rate=clock_rate
            )
        except IngestError:
            self.closed = True
            return -1


@dataclass(slots=True)
class _Leg:
    leg_id: str
    port: int  # 0 for a pushed leg
    sock: socket.socket | None  # None for a pushed leg
    stream_id: int
    payload_types: tuple[PayloadType, ...]
    created_ns: int
    pushed: PushedLeg | None = None
    srtp: SrtpKey | None = None
    shared: bool = False  # on the shared port (keyed by remote and ssrc), sock None
    remote: tuple[str, int] | None = None
    ssrc: int = 0


@dataclass(slots=True)
class _Drain:
    """Legs of an ended call whose buffered audio still plays out (drain_legs)."""

    legs: set[str]
    deadline_ns: int  # the playout tick at or after which they close regardless
    then: Callable[[], None]


class MediaEngine:
    """Legs on native ingest streams, and the playout thread feeding a sink."""

    def __init__(
        self,
        ingest: Ingest,
        ports: PortRange,
        sink: FrameSink,
        *,
        host: str = "127.0.0.1",
        max_delay_ms: int = 300,
        shared_port: int = 0,
    ) -> None:
        """``shared_port`` > 0: SIP legs receive on that one port (see the module doc)."""
        self._ingest = ingest
        self._ports = ports
        self._sink = sink
        self._host = host
        self._max_delay_ms = max_delay_ms
        self._lock = threading.Lock()
        self._legs: dict[str, _Leg] = {}
        self._by_stream: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.late_ticks = 0
        self.shared_fallbacks = 0  # legs that wanted the shared port and got their own
        self.shared_rekey_refused = 0  # re-INVITEs whose new key another leg held
        self.stream_recreations = 0  # new payload-type tables a stream could not take
        self.drained_legs = 0  # legs closed after playing out their buffered audio
        self._drains: list[_Drain] = []
        self._shared_sock: socket.socket | None = None
        self._shared_id: int | None = None
        if shared_port:
            sock = udp_socket(host)
            try:
                sock.bind((host, shared_port))
                self._shared_id = ingest.add_socket(sock)
            except Exception:
                sock.close()
                raise
            self._shared_sock = sock
            log.info("shared RTP port %s: %s", sock.getsockname()[1], families(host))

    @property
    def shared_port(self) -> int:
        """The shared RTP port (0: every leg has its own)."""
        return self._shared_sock.getsockname()[1] if self._shared_sock is not None else 0

    def counters(self) -> dict[str, int]:
        """The shared-port mode's own counters (empty when it is off), for /metrics."""
        if self._shared_id is None:
            return {}
        return {
            "shared_fallbacks": self.shared_fallbacks,
            "shared_rekey_refused": self.shared_rekey_refused,
        }

    def shared_counters(self) -> dict[str, object] | None:
        """The shared socket's counters (datagrams, unmatched, ...), None when off."""
        if self._shared_id is None:
            return None
        with self._lock:
            return self._ingest.socket_counters(self._shared_id)

    # ---- legs ------------------------------------------------------------------------

    def open_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        srtp: SrtpKey | None = None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> int:
        """Bind a port from the range and attach an ingest stream (SRTP-keyed when
        ``srtp`` is given, before any packet can reach it); returns the port.

        With a shared port the leg is keyed instead by ``remote`` (the offer's c= address
        and m= port) and ``ssrc`` (its a=ssrc, 0 = none) and the shared port returned;
        if that key cannot be added the leg falls back to a port of its own."""
        pts = tuple(p for p in payload_types if p.codec in NATIVE_CODECS)
        peer = remote or expected_source
        if peer is not None and not receives_from(self._host, peer[0]):
            log.warning(
                "leg %s: its media comes from %s but the RTP sockets on %s receive %s: "
                "none of it can arrive (set CALLSHIELD_RTP_HOST to :: for both families)",
                leg_id,
                peer[0],
                self._host,
                families(self._host),
            )
        if self._shared_id is not None:
            port = self._open_shared(leg_id, pts, remote, ssrc, srtp)
            if port:
                return port
        now = time.monotonic()
        for _ in range(8):
            port = self._ports.take(now)
            sock = udp_socket(self._host)
            try:
                sock.bind((self._host, port))
            except OSError:
                sock.close()
                self._ports.give_back(port, now)
                continue
            break
        else:
            raise CapacityError("no bindable RTP port")
        try:
            with self._lock:
                sid = self._add(sock, pts, expected_source, srtp)
                self._legs[leg_id] = _Leg(
                    leg_id, port, sock, sid, pts, time.monotonic_ns(), srtp=srtp
                )
                self._by_stream[sid] = leg_id
        except Exception:
            sock.close()
            self._ports.give_back(port, now)
            raise
        return port

    def _open_shared(
        self,
        leg_id: str,
        pts: tuple[PayloadType, ...],
        remote: tuple[str, int] | None,
        ssrc: int,
        srtp: SrtpKey | None,
    ) -> int:
        """The leg on the shared port; 0 when its key cannot be added (fallback)."""
        with self._lock:
            try:
                sid = self._add_shared(pts, remote, ssrc, srtp)
            except (OSError, ValueError) as exc:
                self.shared_fallbacks += 1
                log.warning(
                    "leg %s: no key on the shared RTP port for source %s ssrc %d (%s): "
                    "it gets a port of its own",
                    leg_id,
                    remote,
                    ssrc,
                    exc,
                )
                return 0
            leg = _Leg(leg_id, 0, None, sid, pts, time.monotonic_ns(), srtp=srtp, shared=True)
            leg.remote, leg.ssrc = remote, ssrc
            self._legs[leg_id] = leg
            self._by_stream[sid] = leg_id
        return self.shared_port

    def _add_shared(
        self,
        pts: Sequence[PayloadType],
        remote: tuple[str, int] | None,
        ssrc: int,
        srtp: SrtpKey | None,
    ) -> int:
        """A stream on the shared socket keyed by remote (with a port) and/or ssrc.
        IngestError(EEXIST) when another leg holds the key, (EINVAL) when neither."""
        assert self._shared_id is not None
        source = remote if remote is not None and remote[1] else None
        if source is None and not ssrc:
            raise IngestError(errno.EINVAL, "neither a source port nor an a=ssrc to key on")
        sid = self._ingest.add_stream_shared(
            self._shared_id,
            expected_source=source,
            ssrc=ssrc,
            payload_types=pts,
            max_delay_ms=self._max_delay_ms,
        )
        return self._keyed(sid, srtp)

    def _keyed(self, sid: int, srtp: SrtpKey | None) -> int:
        """``sid`` with its SRTP key set (when given) before any packet can reach it; the
        stream is removed again when the key is refused."""
        if srtp is not None:
            try:
                self._ingest.set_srtp(sid, srtp.suite, srtp.key_salt, srtp.mki)
            except (OSError, ValueError):
                self._ingest.remove_stream(sid)
                raise
        return sid

    def open_pushed_leg(
        self, leg_id: str, payload_types: Sequence[PayloadType], out_rate: int = 8000
    ) -> PushedLeg:
        """A leg fed by an adapter (no socket, no port): returns where to push."""
        pts = tuple(p for p in payload_types if p.codec in NATIVE_CODECS)
        with self._lock:
            try:
                sid = self._ingest.add_stream_push(
                    payload_types=pts, max_delay_ms=self._max_delay_ms, out_rate=out_rate
                )
            except OSError as exc:
                raise CapacityError(f"ingest refused the stream: {exc}") from None
            handle = PushedLeg(self._ingest, sid, leg_id, pts)
            self._legs[leg_id] = _Leg(leg_id, 0, None, sid, pts, time.monotonic_ns(), handle)
            self._by_stream[sid] = leg_id
        return handle

    def _add(
        self,
        sock: socket.socket,
        pts: Sequence[PayloadType],
        source: tuple[str, int] | None,
        srtp: SrtpKey | None,
    ) -> int:
        try:
            sid = self._ingest.add_stream(
                sock, payload_types=pts, max_delay_ms=self._max_delay_ms, expected_source=source
            )
        except OSError as exc:
            raise CapacityError(f"ingest refused the stream: {exc}") from None
        return self._keyed(sid, srtp)

    def update_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> None:
        """Signalling moved or re-coded the media: same port, relearn the source. A new
        payload-type table is applied to the stream in place (``_retable``: counters,
        buffered audio, SRTP state kept); only a table the stream's buffer was not built
        for restarts the stream on the same socket. A shared-port
        leg is re-keyed by ``remote`` and ``ssrc``; when the new key is held by another leg
        the leg keeps its old key (logged, counted in ``shared_rekey_refused``): its new
        media is then unmatched on the shared socket and its coverage reports no media."""
        pts = tuple(p for p in payload_types if p.codec in NATIVE_CODECS)
        with self._lock:
            leg = self._legs[leg_id]
            if leg.pushed is not None:
                raise ValueError(f"{leg_id} is a pushed leg: its adapter owns its media")
            if leg.shared:
                self._update_shared(leg, pts, remote, ssrc)
                return
            assert leg.sock is not None
            if pts != leg.payload_types and not self._retable(leg, pts):
                self._ingest.remove_stream(leg.stream_id)
                del self._by_stream[leg.stream_id]
                leg.stream_id = self._add(leg.sock, pts, expected_source, leg.srtp)
                leg.payload_types = pts
                self._by_stream[leg.stream_id] = leg_id
                return
            if expected_source is not None:
                self._ingest.expect_source(leg.stream_id, *expected_source)
            self._ingest.rearm(leg.stream_id, time.monotonic_ns())

    def _update_shared(
        self,
        leg: _Leg,
        pts: tuple[PayloadType, ...],
        remote: tuple[str, int] | None,
        ssrc: int,
    ) -> None:
        """Re-key a shared leg (lock held): a new table is applied in place when its
        buffer can take it (``_retable``), else, like a new address without a port, it
        re-creates the stream (the old one restored if the new key is taken); a new SSRC
        or address re-keys it in C, keeping the stream (SRTP per-SSRC state, counters): a
        re-INVITE naming the SSRC the leg already followed, or the next one, or changing
        only payload-type numbers, must not reset its replay protection."""
        portless = remote is None or not remote[1]
        recreate = portless and remote != leg.remote
        if not recreate and pts != leg.payload_types:
            recreate = not self._retable(leg, pts)
        if recreate:
            self._ingest.remove_stream(leg.stream_id)
            del self._by_stream[leg.stream_id]
            try:
                sid = self._add_shared(pts, remote, ssrc, leg.srtp)
                leg.payload_types, leg.remote, leg.ssrc = pts, remote, ssrc
            except (OSError, ValueError) as exc:
                sid = self._add_shared(leg.payload_types, leg.remote, leg.ssrc, leg.srtp)
                self._refused_rekey(leg, remote, ssrc, exc)
            leg.stream_id = sid
            self._by_stream[sid] = leg.leg_id
            return
        if ssrc != leg.ssrc:
            try:
                self._ingest.set_ssrc(leg.stream_id, ssrc)
            except (OSError, ValueError) as exc:
                self._refused_rekey(leg, remote, ssrc, exc)
                return
            leg.ssrc = ssrc
        if remote != leg.remote:
            assert remote is not None
            try:
                self._ingest.expect_source(leg.stream_id, *remote)
            except (OSError, ValueError) as exc:
                self._refused_rekey(leg, remote, ssrc, exc)
            else:
                leg.remote = remote
        self._ingest.rearm(leg.stream_id, time.monotonic_ns())

    def _retable(self, leg: _Leg, pts: tuple[PayloadType, ...]) -> bool:
        """The leg's new payload-type table applied to its stream in place (lock held);
        False when the stream's jitter buffer cannot take it (a codec that needs more
        ring bytes per unit, a resampler or Opus decoder it was built without, or audio
        buffered under a codec the table drops): the caller re-creates the stream."""
        try:
            self._ingest.set_payload_types(leg.stream_id, pts)
        except (OSError, ValueError) as exc:
            self.stream_recreations += 1
            log.info(
                "leg %s: payload types %s need a new stream (%s): counters, buffered "
                "audio and SRTP state restart",
                leg.leg_id,
                ",".join(f"{p.pt}:{p.codec}/{p.clock_rate}" for p in pts),
                exc,
            )
            return False
        leg.payload_types = pts
        return True

    def _refused_rekey(
        self, leg: _Leg, remote: tuple[str, int] | None, ssrc: int, exc: Exception
    ) -> None:
        self.shared_rekey_refused += 1
        log.warning(
            "leg %s: cannot re-key the shared RTP port to source %s ssrc %d (%s): "
            "it keeps %s ssrc %d",
            leg.leg_id,
            remote,
            ssrc,
            exc,
            leg.remote,
            leg.ssrc,
        )

    def set_srtp(self, leg_id: str, srtp: SrtpKey | None) -> bool:
        """The leg's SRTP key from a new offer: a new key re-keys its stream (index and
        replay window restart), the same key keeps them, None makes it plain RTP.
        Returns True when the stream was re-keyed."""
        with self._lock:
            leg = self._legs[leg_id]
            if leg.pushed is not None:
                raise ValueError(f"{leg_id} is a pushed leg: its adapter owns its media")
            if srtp == leg.srtp:
                return False
            leg.srtp = srtp
            if srtp is None:
                self._ingest.set_srtp(leg.stream_id, None)
                return False
            return self._ingest.set_srtp(leg.stream_id, srtp.suite, srtp.key_salt, srtp.mki)

    def set_paused(self, leg_id: str, paused: bool) -> None:
        with self._lock:
            self._ingest.set_paused(self._legs[leg_id].stream_id, paused)

    def close_leg(self, leg_id: str) -> None:
        with self._lock:
            leg = self._legs.pop(leg_id, None)
            if leg is None:
                return
            del self._by_stream[leg.stream_id]
            self._ingest.remove_stream(leg.stream_id)
            if leg.pushed is not None:
                leg.pushed.closed = True
        if leg.sock is not None:
            leg.sock.close()
            self._ports.give_back(leg.port, time.monotonic())

    def drain_legs(self, leg_ids: Sequence[str], then: Callable[[], None]) -> bool:
        """Close the legs of an ended call once the audio their jitter buffers hold has
        been played out to the sink: a hang-up must not cost the analysis (and the
        evidence) the call's last target delay of audio.

        True: nothing to play out (every leg's buffer is empty and nothing arrived since
        the last pull, or the playout clock is not running): the legs are closed now and
        ``then`` is not called. Otherwise the playout thread closes each leg after the
        tick that emits the last audio it held when this was called (by its buffer level
        then, at most ``max_delay_ms``), and calls ``then`` from that thread when all are
        closed. A pushed leg takes no push from now on; a socket leg still receives until
        it closes, but audio that arrives after this call is not waited for."""
        now = time.monotonic_ns()
        with self._lock:
            level_ms = 0
            for leg_id in leg_ids:
                leg = self._legs.get(leg_id)
                if leg is None:
                    continue
                if leg.pushed is not None:
                    leg.pushed.closed = True
                stats = self._ingest.stream_stats(leg.stream_id)
                level_ms = max(level_ms, int(stats["buffer_level_ms"]))
                arrival = int(self._ingest.stream_counters(leg.stream_id)["last_arrival_ns"])
                if arrival and now - arrival < 2 * FRAME_NS:  # since the last pull's level
                    level_ms = max(level_ms, int(stats["target_delay_ms"]), 1)
            if level_ms and self.playout_alive():
                deadline = now + (min(level_ms, self._max_delay_ms) * 1_000_000) + 2 * FRAME_NS
                self._drains.append(_Drain(set(leg_ids) & set(self._legs), deadline, then))
                return False
        for leg_id in leg_ids:
            self.close_leg(leg_id)
        return True

    def idle_ns(self, leg_id: str, now_ns: int) -> int:
        """How long the leg has received nothing (since it opened, if never)."""
        with self._lock:
            leg = self._legs[leg_id]
            last = int(self._ingest.stream_counters(leg.stream_id)["last_arrival_ns"])
        return now_ns - max(last, leg.created_ns)

    def stats(self, leg_id: str) -> dict[str, object]:
        with self._lock:
            sid = self._legs[leg_id].stream_id
            out = self._ingest.stream_stats(sid)
            out["counters"] = self._ingest.stream_counters(sid)
        return out

    @property
    def leg_ids(self) -> list[str]:
        return list(self._legs)

    @property
    def free_ports(self) -> int:
        return self._ports.free

    # ---- the playout clock -------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._playout, name="playout", daemon=True)
        self._thread.start()

    def playout_alive(self) -> bool:
        """The playout thread is running (liveness)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._finish_drains(None)
        for leg_id in list(self._legs):
            self.close_leg(leg_id)
        if self._shared_sock is not None:
            assert self._shared_id is not None
            with self._lock:
                self._ingest.remove_socket(self._shared_id)
            self._shared_sock.close()
            self._shared_sock = self._shared_id = None

    def _playout(self) -> None:
        """Every 20 ms on the monotonic clock, one batch pull of all legs. A late tick
        is caught up (each due tick is pulled at its own due time), never skipped."""
        due = time.monotonic_ns()
        legs: tuple[str, ...] = ()
        last_frames: PulledFrames | None = None
        while not self._stop.is_set():
            wait = (due - time.monotonic_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                return
            if time.monotonic_ns() - due > FRAME_NS:
                self.late_ticks += 1
            with self._lock:
                frames = self._ingest.pull_all(due)
                if frames is not last_frames:
                    legs = tuple(self._by_stream[int(s)] for s in frames.ids)
                    last_frames = frames
                if legs:
                    try:
                        self._sink.on_frames(due, legs, frames)
                    except Exception:
                        log.exception("frame sink failed; frames of this tick dropped")
                drained = self._played_out(due, legs, frames) if self._drains else None
            if drained:
                self._finish_drains(drained)
            self.ticks += 1
            due += FRAME_NS

    def _played_out(self, due: int, legs: Sequence[str], frames: PulledFrames) -> set[str]:
        """Draining legs (lock held) whose last buffered audio this tick emitted."""
        done: set[str] = set()
        flags, levels = frames.infos["flag"], frames.infos["buffer_level_ms"]
        for drain in self._drains:
            for leg_id in drain.legs:
                if due >= drain.deadline_ns or leg_id not in legs:
                    done.add(leg_id)
                    continue
                row = legs.index(leg_id)
                started = int(flags[row]) != FrameFlag.NOT_STARTED
                if started and int(levels[row]) * 1_000_000 <= FRAME_NS:
                    done.add(leg_id)
        return done

    def _finish_drains(self, done: set[str] | None) -> None:
        """Close drained legs (None: every draining leg, at stop) and call a drain's
        ``then`` once all its legs are closed."""
        finished: list[Callable[[], None]] = []
        closing: set[str] = set()
        with self._lock:
            for drain in list(self._drains):
                ended = set(drain.legs) if done is None else drain.legs & done
                closing |= ended
                drain.legs -= ended
                if not drain.legs:
                    self._drains.remove(drain)
                    finished.append(drain.then)
        for leg_id in closing:
            self.close_leg(leg_id)
        self.drained_legs += len(closing)
        for then in finished:
            try:
                then()
            except Exception:
                log.exception("an ended call's follow-up failed")


def families(host: str) -> str:
    """What an RTP socket bound on ``host`` receives (native.ingest.udp_socket)."""
    if dual_stack(host):
        return "IPv4 and IPv6 on one dual-stack socket (IPV6_V6ONLY off)"
    return "IPv6 only (IPV6_V6ONLY on)" if ":" in host else "IPv4 only"


def receives_from(host: str, peer: str) -> bool:
    """Whether a socket bound on ``host`` can receive from address ``peer`` (a name that
    is not an address literal is given the benefit of the doubt)."""
    try:
        ip = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return True
    v6 = ip.version == 6 and ip.ipv4_mapped is None
    return dual_stack(host) or v6 == (":" in host)
