"""A STIR/SHAKEN test PKI made in the test (cryptography): a root CA, an SP signing
certificate under it, PASSporTs signed with its key (ES256, JWS compact form) and the
trust store directories the bridge reads."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

X5U = "https://cr.sp.example/certs/sp-1234.pem"
TN_AUTH_LIST = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.26")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _root(key: ec.EllipticCurvePrivateKey, cn: str, now: dt.datetime) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


@dataclass
class StirPki:
    root: x509.Certificate
    leaf: x509.Certificate
    leaf_key: ec.EllipticCurvePrivateKey
    other_root: x509.Certificate  # a CA the store does not trust

    @classmethod
    def make(cls) -> StirPki:
        now = dt.datetime.now(dt.UTC)
        root_key = ec.generate_private_key(ec.SECP256R1())
        root = _root(root_key, "STI-PA Test Root", now)
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(_name("SHAKEN 1234"))
            .issuer_name(root.subject)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()),
                critical=False,
            )
            .add_extension(
                x509.UnrecognizedExtension(TN_AUTH_LIST, b"\x30\x08\xa0\x06\x16\x041234"),
                critical=False,
            )
            .sign(root_key, hashes.SHA256())
        )
        other = _root(ec.generate_private_key(ec.SECP256R1()), "Somebody Else", now)
        return cls(root, leaf, leaf_key, other)

    def trust_dirs(self, base: Path, *, trusted: bool = True) -> tuple[Path, Path]:
        """(ca_dir, cert_cache): the root (or another CA) and the x5u cache holding the
        SP certificate, by index.json."""
        ca_dir, cache = base / "ca", base / "x5u"
        ca_dir.mkdir(parents=True)
        cache.mkdir(parents=True)
        root = self.root if trusted else self.other_root
        (ca_dir / "root.pem").write_bytes(root.public_bytes(serialization.Encoding.PEM))
        (cache / "sp.pem").write_bytes(self.leaf.public_bytes(serialization.Encoding.PEM))
        (cache / "index.json").write_text(json.dumps({X5U: "sp.pem"}))
        return ca_dir, cache

    def cache_by_digest(self, cache: Path, url: str) -> None:
        name = hashlib.sha256(url.encode()).hexdigest() + ".pem"
        (cache / name).write_bytes(self.leaf.public_bytes(serialization.Encoding.PEM))

    def passport(
        self,
        *,
        orig: str = "12155550121",
        dest: str = "12155550131",
        attest: str = "A",
        iat: int,
        x5u: str = X5U,
        origid: str = "123e4567-e89b-12d3-a456-426655440000",
        alg: str = "ES256",
    ) -> str:
        """An Identity header value (RFC 8224 full form, RFC 8588 shaken)."""
        header = {"alg": alg, "ppt": "shaken", "typ": "passport", "x5u": x5u}
        claims = {
            "attest": attest,
            "dest": {"tn": [dest]},
            "iat": iat,
            "orig": {"tn": orig},
            "origid": origid,
        }
        h = b64url(json.dumps(header, separators=(",", ":")).encode())
        c = b64url(json.dumps(claims, separators=(",", ":")).encode())
        der = self.leaf_key.sign(f"{h}.{c}".encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        sig = b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        return f"{h}.{c}.{sig};info=<{x5u}>;alg=ES256;ppt=shaken"
