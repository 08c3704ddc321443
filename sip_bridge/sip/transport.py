"""The asyncio shell around :class:`SipUas`: SIP over UDP and TCP on one address, and
over TLS on another when a certificate is configured.

UDP: one datagram is one message. TCP and TLS: messages are framed by their
Content-Length (RFC 3261 §18.3; leading CRLF keep-alives skipped); a connection that
sends an oversized or unframeable message is closed. TLS connections are accepted with
reading paused and upgraded with our handshake (bounded in time: nothing is read before
it, so the ClientHello reaches it), so a failed one (no client certificate where mutual
TLS is required, one the CA did not sign, a plain-TCP client) is counted
(``tls_handshake_failed``) and closed. A timer task runs the UAS's timers
(retransmissions, delayed answers, RTP timeouts) at their deadlines. Receive loops count
and drop: a handler error never reaches the loop, and never affects another call.

Trust (sip_bridge.sip.trust): before the UAS sees a message, its peer must be on the
allowlist (source network, or a name in its verified TLS certificate; decided once per
TLS connection). An untrusted request gets 403 and is counted (``untrusted``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from sip_bridge.sip.message import MAX_MESSAGE_BYTES
from sip_bridge.sip.transaction import Outgoing, Peer
from sip_bridge.sip.trust import PeerTrust, certificate_names, forbidden
from sip_bridge.sip.uas import SipUas

log = logging.getLogger(__name__)
TICK_S = 0.02
TLS_HANDSHAKE_S = 10.0


@dataclass(frozen=True, slots=True)
class TlsListener:
    host: str
    port: int
    context: ssl.SSLContext


def server_context(cert: Path, key: Path, ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2+ server context; with ``ca`` every client must present a certificate
    that CA signed (mutual TLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if ca is not None:
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: SipServer) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        host, port = str(addr[0]), int(str(addr[1]))
        self.server.handle(data, Peer("udp", host, port))

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)


class _TlsAccept(asyncio.Protocol):
    """Holds a fresh TCP connection unread until the TLS handshake takes it over."""

    def __init__(self, server: SipServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self.server._serve_tls(transport))
        self.server._tasks.add(task)
        task.add_done_callback(self.server._tasks.discard)


class SipServer:
    def __init__(
        self,
        uas: SipUas,
        host: str,
        port: int,
        *,
        tls: TlsListener | None = None,
        trust: PeerTrust | None = None,
    ) -> None:
        self.uas = uas
        self.host, self.port = host, port
        self.tls, self.tls_port = tls, 0
        self.trust = trust or PeerTrust()
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.base_events.Server | None = None
        self._tls_server: asyncio.base_events.Server | None = None
        self._tls_trusted: dict[int, bool] = {}  # TLS connection -> decided at handshake
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: dict[int, asyncio.StreamWriter] = {}
        self._ids = itertools.count(1)
        self._timer: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ephemeral = self.port == 0
        for attempt in range(20):
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _Udp(self), local_addr=(self.host, 0 if ephemeral else self.port)
            )
            port = int(transport.get_extra_info("sockname")[1])
            try:  # TCP on the same number: with an ephemeral UDP port it may be taken
                self._tcp = await asyncio.start_server(self._serve_tcp, self.host, port)
            except OSError as exc:
                transport.close()
                if not ephemeral or exc.errno != errno.EADDRINUSE or attempt == 19:
                    raise
                continue
            self._udp, self.port = transport, port
            break
        if self.tls is not None:
            self._tls_server = await asyncio.get_running_loop().create_server(
                lambda: _TlsAccept(self), self.tls.host, self.tls.port
            )
            self.tls_port = int(self._tls_server.sockets[0].getsockname()[1])
        self._timer = asyncio.create_task(self._timers())

    async def close(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        if self._tcp is not None:
            self._tcp.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for writer in list(self._conns.values()):
            writer.close()
        if self._udp is not None:
            self._udp.close()

    # ---- in and out --------------------------------------------------------------------

    def handle(self, data: bytes, peer: Peer) -> None:
        if not self._trusted(peer):
            self.uas.stats["untrusted"] += 1
            reply = forbidden(data, peer)
            if reply is not None:
                self.uas.stats["sent.403"] += 1
                self.send([Outgoing(peer, reply)])
            return
        try:
            out = self.uas.on_datagram(data, peer, time.monotonic())
        except Exception:
            self.uas.stats["handler_errors"] += 1
            log.exception("SIP handler failed; message dropped")
            return
        self.send(out)

    def send(self, messages: list[Outgoing]) -> None:
        for out in messages:
            if out.peer.transport == "udp":
                if self._udp is not None:
                    self._udp.sendto(out.data, (out.peer.host, out.peer.port))
            else:
                writer = self._conns.get(out.peer.conn_id)
                if writer is not None and not writer.is_closing():
                    writer.write(out.data)
                else:
                    self.uas.stats["unsendable"] += 1

    async def _timers(self) -> None:
        """Run the UAS's timers: at its next deadline, at most TICK_S apart (a 20 ms
        tick costs nothing and keeps delayed answers and retransmissions on time)."""
        while not self._closing:
            now = time.monotonic()
            try:
                self.send(self.uas.poll(now))
            except Exception:
                log.exception("SIP timer processing failed")
            deadline = self.uas.next_deadline()
            wait = TICK_S if deadline is None else min(max(deadline - now, 0.001), TICK_S)
            await asyncio.sleep(wait)

    def _trusted(self, peer: Peer) -> bool:
        if self.trust.everyone:
            return True
        if peer.transport == "tls":
            return self._tls_trusted.get(peer.conn_id, False)
        return self.trust.allows(peer.host)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve_stream(reader, writer, next(self._ids), "tcp")

    async def _serve_tls(self, raw: asyncio.Transport) -> None:
        assert self.tls is not None
        loop = asyncio.get_running_loop()
        conn = next(self._ids)
        reader = asyncio.StreamReader()  # the default limit, as on TCP
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            handshake = loop.start_tls(raw, protocol, self.tls.context, server_side=True)
            tls = await asyncio.wait_for(handshake, TLS_HANDSHAKE_S)
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            self.uas.stats["tls_handshake_failed"] += 1
            log.debug("TLS handshake failed: %s", exc)
            raw.abort()
            return
        if tls is None:  # the connection went away during the handshake
            self.uas.stats["tls_handshake_failed"] += 1
            return
        protocol.connection_made(tls)
        writer = asyncio.StreamWriter(tls, protocol, reader, loop)
        self.uas.stats["tls_connections"] += 1
        host = str(writer.get_extra_info("peername")[0])
        names = certificate_names(writer.get_extra_info("peercert"))
        self._tls_trusted[conn] = self.trust.allows(host, names)
        try:
            await self._serve_stream(reader, writer, conn, "tls")
        finally:
            self._tls_trusted.pop(conn, None)

    async def _serve_stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: int,
        transport: str,
    ) -> None:
        self._conns[conn] = writer
        host, port = writer.get_extra_info("peername")[:2]
        peer = Peer(transport, str(host), int(port), conn)
        try:
            while True:
                message = await _read_framed(reader)
                if message is None:
                    break
                self.handle(message, peer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            log.debug("%s connection closed: %s", transport.upper(), exc)
        finally:
            self._conns.pop(conn, None)
            writer.close()


async def _read_framed(reader: asyncio.StreamReader) -> bytes | None:
    """One Content-Length-framed message; None at a clean end of stream."""
    head = b""
    while not head:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise ValueError("stream ended inside a message") from None
            return None
        except asyncio.LimitOverrunError:
            raise ValueError("headers too long") from None
        head = head.lstrip(b"\r\n")
        if not head.strip():
            head = b""
    if len(head) > MAX_MESSAGE_BYTES:
        raise ValueError("headers too long")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() in (b"content-length", b"l"):
            text = value.strip()
            if not text.isdigit() or int(text) > MAX_MESSAGE_BYTES:
                raise ValueError("bad Content-Length on TCP")
            length = int(text)
    body = await reader.readexactly(length) if length else b""
    return head + body
