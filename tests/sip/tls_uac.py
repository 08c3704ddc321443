"""A test CA made on the spot (cryptography), and a minimal SIP user agent client over
TLS (Python ssl, blocking sockets with timeouts) for the bridge's SIP-over-TLS tests."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class TestCa:
    """A CA that issues server and client certificates into ``folder``."""

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, name: str = "CallShield test CA") -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.path = folder / f"{secrets.token_hex(4)}-ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, dns: tuple[str, ...] = (), ip: str = "") -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        if ip:
            names.append(x509.IPAddress(ipaddress.ip_address(ip)))
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = self.folder / f"{common_name}-{secrets.token_hex(4)}"
        issued = Issued(stem.with_suffix(".crt"), stem.with_suffix(".key"))
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return issued


def tls_connect(port: int, server_ca: Path, client: Issued | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(server_ca))
    if client is not None:
        ctx.load_cert_chain(client.cert, client.key)
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


class SipOverStream:
    """Requests out, Content-Length-framed responses in, on one stream socket."""

    def __init__(self, sock: socket.socket, transport: str = "TLS") -> None:
        self.sock = sock
        self.transport = transport
        self.local = sock.getsockname()[:2]
        self._buf = b""

    def send(self, method: str, uri: str, headers: list[str], body: str = "") -> str:
        branch = "z9hG4bK" + secrets.token_hex(8)
        host, port = self.local
        lines = [
            f"{method} {uri} SIP/2.0",
            f"Via: SIP/2.0/{self.transport} {host}:{port};branch={branch};rport",
            "Max-Forwards: 70",
            *headers,
        ]
        data = body.replace("\n", "\r\n").encode()
        if data:
            lines.append("Content-Type: application/sdp")
        lines.append(f"Content-Length: {len(data)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        return branch

    def response(self) -> tuple[int, dict[str, str], str]:
        """(status, headers by lower-case name (last wins), body) of the next response."""
        while b"\r\n\r\n" not in self._buf:
            self._read()
        head, _, rest = self._buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            self._read()
            rest = self._buf.partition(b"\r\n\r\n")[2]
        self._buf = rest[length:]
        return int(lines[0].split()[1]), headers, rest[:length].decode()

    def final(self) -> tuple[int, dict[str, str], str]:
        while True:
            status, headers, body = self.response()
            if status >= 200:
                return status, headers, body

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the bridge")
        self._buf += chunk
