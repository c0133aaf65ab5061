"""Certificates and SuperNode keys for the TLS deployment tests (tests/flower/test_flower_runs.py),
made with the cryptography package (installed with flwr) as docs/flower.md's recipe makes them
with openssl and ssh-keygen."""

from __future__ import annotations

from pathlib import Path


def make_tls(d: Path, addresses=("127.0.0.1",), names=("localhost",)):
    """A private CA and a SuperLink certificate signed by it whose subjectAltName holds
    ``addresses`` and ``names`` (the recipe of docs/flower.md, with the cryptography package
    instead of openssl); P-256 keys, valid for a day."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from fedselect.flower.deployment import TLSFiles

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, public, signer, extensions):
        b = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
        b = b.serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        b = b.not_valid_after(now + datetime.timedelta(days=1))
        for ext, critical in extensions:
            b = b.add_extension(ext, critical=critical)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedselect test CA")])
    ca = cert(ca_name, ca_name, ca_key.public_key(), ca_key, [(x509.BasicConstraints(ca=True, path_length=None), True)])
    san = [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses] + [x509.DNSName(n) for n in names]
    server = cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]),
        ca_name,
        key.public_key(),
        ca_key,
        [(x509.SubjectAlternativeName(san), False)],
    )
    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (d / "server.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return TLSFiles(d / "ca.crt", d / "server.pem", d / "server.key")


def make_node_key(path: Path) -> Path:
    """A SuperNode's key pair as `ssh-keygen -t ecdsa -b 384 -N "" -f PATH` writes it: an
    OpenSSH-format P-384 private key at ``path`` and its public key at ``path.pub``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP384R1())
    path.write_bytes(
        k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    path.with_name(path.name + ".pub").write_bytes(
        k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    return path
