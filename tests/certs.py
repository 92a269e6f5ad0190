"""A private CA, made fresh by a test: a server certificate for 127.0.0.1 and a client
certificate, both signed by it, as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: pathlib.Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
           ) -> tuple[str, str]:
    cert_path, key_path = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def make_pki(directory: pathlib.Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("rocketq test CA"))
          .issuer_name(_name("rocketq test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    ca_path, _ = _write(directory / "ca", ca, ca_key)

    def leaf(cn: str, usage, san: list[x509.GeneralName] | None):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return _write(directory / cn, builder.sign(ca_key, hashes.SHA256()), key)

    server = leaf("server", ExtendedKeyUsageOID.SERVER_AUTH,
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                   x509.DNSName("localhost")])
    client = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    return Pki(ca_path, *server, *client)
