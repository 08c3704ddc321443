"""The asyncio shell around :class:`SipUas`: SIP over UDP and TCP on one address.

UDP: one datagram is one message. TCP: messages are framed by their Content-Length
(RFC 3261 §18.3; leading CRLF keep-alives skipped); a connection that sends an oversized
or unframeable message is closed. A timer task runs the UAS's timers (retransmissions,
delayed answers, RTP timeouts) at their deadlines. Receive loops count and drop: a
handler error never reaches the loop, and never affects another call.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import time

from sip_bridge.sip.message import MAX_MESSAGE_BYTES
from sip_bridge.sip.transaction import Outgoing, Peer
from sip_bridge.sip.uas import SipUas

log = logging.getLogger(__name__)
TICK_S = 0.02


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: SipServer) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        host, port = str(addr[0]), int(str(addr[1]))
        self.server.handle(data, Peer("udp", host, port))

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)


class SipServer:
    def __init__(self, uas: SipUas, host: str, port: int) -> None:
        self.uas = uas
        self.host, self.port = host, port
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.base_events.Server | None = None
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
        self._timer = asyncio.create_task(self._timers())

    async def close(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        if self._tcp is not None:
            self._tcp.close()
        for writer in list(self._conns.values()):
            writer.close()
        if self._udp is not None:
            self._udp.close()

    # ---- in and out --------------------------------------------------------------------

    def handle(self, data: bytes, peer: Peer) -> None:
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

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._ids)
        self._conns[conn] = writer
        host, port = writer.get_extra_info("peername")[:2]
        peer = Peer("tcp", str(host), int(port), conn)
        try:
            while True:
                message = await _read_framed(reader)
                if message is None:
                    break
                self.handle(message, peer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            log.debug("TCP connection closed: %s", exc)
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
