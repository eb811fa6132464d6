"""A development CA and serving certificate, in cert-manager's layout, for `make run` and tests.

Production certificates come from cert-manager (k8s/); this module only makes a private
CA on first run so that the server never speaks plain HTTP, even on a laptop.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hooksvc development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(subject: str, issuer: x509.Name, key: Key, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def make_ca(common_name: str = "hooksvc development CA") -> tuple[x509.Certificate, Key]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(common_name, _name(common_name), key, days=3650)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(
    ca_cert: x509.Certificate,
    ca_key: Key,
    common_name: str,
    *,
    hosts: tuple[str, ...] = (),
    client: bool = False,
    days: int = 365,
) -> tuple[x509.Certificate, Key]:
    """A leaf certificate signed by the CA: a server certificate for `hosts`, or a client one."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        _builder(common_name, ca_cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """`data` into `path` with `mode` from the file's creation (a key is never readable by
    others, not even between a write and a chmod), replacing it whole."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


def write_serving_files(
    tls_dir: Path, ca_cert: x509.Certificate, cert: x509.Certificate, key: Key
) -> None:
    """Write tls.crt, tls.key and ca.crt, as a cert-manager Secret volume holds them."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    _write(tls_dir / "tls.key", key_pem(key), 0o600)
    _write(tls_dir / "tls.crt", cert_pem(cert), 0o644)
    _write(tls_dir / "ca.crt", cert_pem(ca_cert), 0o644)


def ensure(tls_dir: Path, *, hosts: tuple[str, ...] = DEFAULT_HOSTS) -> bool:
    """Create a CA and serving certificate in `tls_dir` unless one is there; True if created."""
    if (tls_dir / "tls.crt").exists() and (tls_dir / "tls.key").exists():
        return False
    ca_cert, ca_key = make_ca()
    cert, key = issue(ca_cert, ca_key, hosts[0], hosts=hosts)
    write_serving_files(tls_dir, ca_cert, cert, key)
    # The CA key stays beside the CA so that client certificates can be issued for mTLS.
    _write(tls_dir / "ca.key", key_pem(ca_key), 0o600)
    return True
