"""`torchyard-server certs`: the TLS material a production install needs once, before remote agents
join: a private certificate authority and a server certificate it signs, for Redis's TLS port, the
S3 store (MinIO) and, where you want it, the web process.

    torchyard-server certs --out var/certs --host ctl.example.com --host 203.0.113.7

writes into --out:
    ca.pem           the authority's certificate: what agents trust (the server hands it to them,
                     /api/agent/config `ca_pem`, when TORCHYARD_AGENT_CA_FILE names it)
    ca-key.pem       the authority's key (0600): keep it; a later run signs new server certificates
                     with it, so agents keep trusting the same ca.pem
    server.pem       the server certificate, for every --host (names and addresses) plus localhost,
                     127.0.0.1 and the compose services' names
    server-key.pem   its key (0600; --key-owner gives it to the user a container reads it as)
    public.crt, private.key, CAs/ca.pem
                     the same, under the names MinIO looks for in its --certs-dir

Run again to add a host: the authority is reused (--new-ca replaces it, and every agent must then
be given the new ca.pem). Keys are ECDSA P-256, which Redis, MinIO and Python's ssl all accept.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Names the compose stack's containers use for each other: the certificate covers them too, so a
# process inside the stack may speak TLS to `redis` or `minio` as well.
DEFAULT_NAMES = ("localhost", "127.0.0.1", "::1", "redis", "minio", "web")
CA_DAYS = 3650


@dataclass(frozen=True)
class Written:
    ca: Path
    cert: Path
    key: Path
    ca_created: bool
    names: tuple[str, ...]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Torchyard"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _subject_alt_names(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def check_host(text: str) -> str:
    """A host name or an IP address; anything else (a URL, a port, spaces) is refused."""
    value = text.strip()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    if not value or len(value) > 253 or not all(
            0 < len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
            and not label.startswith("-") and not label.endswith("-") for label in labels):
        raise ValueError(f"{text!r} is neither a host name nor an IP address (give the name alone: no scheme, "
                         "port or path)")
    return value.lower()


def make_ca(days: int = CA_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("Torchyard private CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, names: list[str],
                     days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0])).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(min(_now() + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_subject_alt_names(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Created with its final mode (a key is never readable by others, not even for a moment)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def write_certs(out: Path, hosts: list[str], *, days: int = 825, new_ca: bool = False,
                key_owner: tuple[int, int] | None = None) -> Written:
    """Create (or reuse) the authority under `out` and sign a server certificate for `hosts`."""
    names = list(dict.fromkeys([check_host(h) for h in hosts] + list(DEFAULT_NAMES)))
    out.mkdir(parents=True, exist_ok=True)
    ca_path, ca_key_path = out / "ca.pem", out / "ca-key.pem"
    created = new_ca or not (ca_path.exists() and ca_key_path.exists())
    if created:
        ca_key, ca_cert = make_ca()
        _write(ca_key_path, _key_pem(ca_key), 0o600)
        _write(ca_path, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    else:
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_path}: not an ECDSA key written by this command")
        ca_key, ca_cert = loaded, x509.load_pem_x509_certificate(ca_path.read_bytes())
    key, cert = make_server_cert(ca_key, ca_cert, names, days)
    key_path, cert_path = out / "server-key.pem", out / "server.pem"
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    if key_owner is not None:
        os.chown(key_path, *key_owner)
    # MinIO's --certs-dir layout, pointing at the same files.
    _link(out / "public.crt", "server.pem")
    _link(out / "private.key", "server-key.pem")
    (out / "CAs").mkdir(exist_ok=True)
    _link(out / "CAs" / "ca.pem", "../ca.pem")
    return Written(ca=ca_path, cert=cert_path, key=key_path, ca_created=created, names=tuple(names))


def _owner(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give UID or UID:GID (numbers)") from None


def _host(text: str) -> str:
    try:
        return check_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torchyard-server certs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="directory to write into (created)")
    parser.add_argument("--host", action="append", type=_host, required=True,
                        help="a name or address agents use to reach this server (repeat for several)")
    parser.add_argument("--days", type=int, default=825, help="the server certificate's validity (default 825)")
    parser.add_argument("--new-ca", action="store_true", help="replace the authority instead of reusing it")
    parser.add_argument("--key-owner", type=_owner, metavar="UID[:GID]",
                        help="give server-key.pem to this user (the compose file's Redis reads it as 999)")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be at least 1")
    written = write_certs(args.out, args.host, days=args.days, new_ca=args.new_ca, key_owner=args.key_owner)
    print(f"{'created' if written.ca_created else 'reused'} the authority {written.ca}")
    print(f"signed {written.cert} for {', '.join(written.names)}")
    print("agents trust ca.pem: set TORCHYARD_AGENT_CA_FILE to it on the server (or give agents --ca-file)")
    return 0
