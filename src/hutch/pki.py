"""The gateway's certificates, made with ``cryptography`` (no openssl subprocess).

``hutch gateway init`` makes a CA and the server's certificate (its names and addresses
from flags) in ``$HUTCH_HOME/gateway``; the daemon then issues client certificates from
that CA (``hutch gateway issue``), each bound to an API key, and writes a profile bundle:
one JSON file with the gateway's URL, its CA, the client's certificate and (unless the
client sent a CSR of its own) the client's private key, which ``hutch login`` turns into
a ``[profiles.NAME]`` entry of config.toml.

Keys are ECDSA P-256 (small, fast to make and to verify). A client certificate says its
name as its subject's common name and its key as a URI name (``urn:hutch:key:KEY_ID``);
what binds it to the key is the daemon's record of its SHA-256 fingerprint.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hutch.errors import InvalidError, NotFoundError

BUNDLE_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
MAX_TTL = 10 * 365 * 86400
MAX_CSR = 64 << 10
CLOCK_SKEW = 300  # a certificate is valid from 5 minutes ago: a client's clock a little behind still accepts it
Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class GatewayFiles:
    """Where ``hutch gateway init`` keeps the gateway's certificates."""

    dir: Path

    ca_cert = property(lambda self: self.dir / "ca.pem")
    ca_key = property(lambda self: self.dir / "ca.key")
    server_cert = property(lambda self: self.dir / "server.pem")
    server_key = property(lambda self: self.dir / "server.key")
    info = property(lambda self: self.dir / "gateway.json")

    @classmethod
    def of(cls, home: Path) -> GatewayFiles:
        return cls(home / "gateway")

    def exists(self) -> bool:
        return bool(self.ca_cert.is_file() and self.ca_key.is_file())

    def url(self) -> str:
        try:
            return str(json.loads(self.info.read_text()).get("url", ""))
        except (OSError, ValueError):
            return ""


def check_name(name: str, what: str = "name") -> str:
    if not NAME_RE.match(name):
        raise InvalidError(
            f"{what} {name!r} is not valid", hint="letters, digits and _ . @ - (at most 64, starting with a letter or digit)"
        )
    return name


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: Key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert: x509.Certificate | bytes) -> str:
    """SHA-256 of the DER form, hex (``bytes``: a DER certificate)."""
    der = cert if isinstance(cert, bytes) else cert.public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def _write(path: Path, data: bytes, secret: bool) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _split_names(names: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            if not re.match(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$", name):
                raise InvalidError(
                    f"{name!r} is neither a host name nor an IP address", hint="e.g. --name gw.example.com --name 127.0.0.1"
                ) from None
            out.append(x509.DNSName(name.lower()))
    return out


def init(files: GatewayFiles, names: list[str], url: str, *, days: int = 825, force: bool = False) -> dict[str, Any]:
    """Make the CA (kept when it exists, unless ``force``) and the server certificate for ``names``."""
    if not names:
        raise InvalidError("the server certificate needs at least one name", hint="e.g. --name gw.example.com --name 127.0.0.1")
    if not 1 <= days <= 3650:
        raise InvalidError(f"--days {days} is out of range", hint="from 1 to 3650")
    sans = _split_names(names)
    files.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(files.dir, 0o700)
    made_ca = force or not files.exists()
    if made_ca:
        ca_key = new_key()
        subject = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, "hutch gateway CA"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hutch")]
        )
        ca = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(seconds=CLOCK_SKEW))
            .not_valid_after(_now() + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,  # cert and CRL signing
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(files.ca_key, key_pem(ca_key), secret=True)
        _write(files.ca_cert, cert_pem(ca), secret=False)
    ca, ca_key = load_ca(files)
    server_key = new_key()
    first = names[0]
    server = (
        _leaf(ca, ca_key, server_key.public_key(), first, days * 86400, ExtendedKeyUsageOID.SERVER_AUTH)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(files.server_key, key_pem(server_key), secret=True)
    _write(files.server_cert, cert_pem(server), secret=False)
    _write(files.info, json.dumps({"url": url, "names": names}).encode(), secret=False)
    return {
        "dir": str(files.dir),
        "ca": str(files.ca_cert),
        "ca_created": made_ca,
        "server_cert": str(files.server_cert),
        "server_key": str(files.server_key),
        "names": names,
        "url": url,
        "ca_fingerprint": fingerprint(ca),
    }


def _leaf(
    ca: x509.Certificate, ca_key: Key, public: Any, cn: str, ttl: float, usage: x509.ObjectIdentifier
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hutch")])
        )
        .issuer_name(ca.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(seconds=CLOCK_SKEW))
        .not_valid_after(_now() + datetime.timedelta(seconds=ttl))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, True, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )


def load_ca(files: GatewayFiles) -> tuple[x509.Certificate, Key]:
    if not files.exists():
        raise NotFoundError(
            f"no gateway CA in {files.dir}", hint="make one on the gateway's host: hutch gateway init --name HOST"
        )
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InvalidError(f"{files.ca_key} is not an EC key", hint="make the CA again: hutch gateway init --force")
    return ca, key


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: Key | None  # None: the client sent a CSR and keeps its key

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cert)

    @property
    def serial(self) -> str:
        return format(self.cert.serial_number, "x")

    @property
    def not_after(self) -> float:
        return self.cert.not_valid_after_utc.timestamp()


def issue_client(files: GatewayFiles, name: str, key_id: str, ttl: float, csr_pem: str | None = None) -> Issued:
    """A client certificate for ``name`` bound to ``key_id``; from ``csr_pem`` when the
    client made its own key (its subject must name ``name``, its signature must hold)."""
    check_name(name)
    if not 60 <= ttl <= MAX_TTL:
        raise InvalidError(f"a certificate's ttl of {ttl:g}s is out of range", hint="from 1m to 3650d")
    ca, ca_key = load_ca(files)
    key: Key | None = None
    if csr_pem is not None:
        public = load_csr(csr_pem, name).public_key()
    else:
        key = new_key()
        public = key.public_key()
    builder = _leaf(ca, ca_key, public, name, ttl, ExtendedKeyUsageOID.CLIENT_AUTH).add_extension(
        x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"urn:hutch:key:{key_id}")]), critical=False
    )
    return Issued(builder.sign(ca_key, hashes.SHA256()), key)


def load_csr(csr_pem: str, name: str) -> x509.CertificateSigningRequest:
    """A CSR checked: PEM, bounded, its signature holds, its subject is ``CN=name`` and nothing else."""
    if len(csr_pem) > MAX_CSR:
        raise InvalidError("the CSR is too large", hint="a PEM certificate signing request of at most 64 KiB")
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError:
        raise InvalidError("the CSR is not a PEM certificate signing request", hint="make one with your key (CN=NAME)") from None
    if not csr.is_signature_valid:
        raise InvalidError("the CSR's signature does not hold", hint="sign it with the key it carries")
    cns = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [name]:
        said = ", ".join(map(str, cns)) or "no name"
        raise InvalidError(
            f"the CSR is for {said}, not {name}", hint=f"make the CSR with the subject CN={name}, or issue for its name"
        )
    return csr


def bundle(name: str, url: str, ca: bytes, cert: bytes, key: bytes | None) -> dict[str, Any]:
    """The profile bundle: everything ``hutch login`` needs, in one JSON document."""
    out: dict[str, Any] = {"hutch_profile": BUNDLE_VERSION, "name": name, "url": url, "ca": ca.decode(), "cert": cert.decode()}
    if key is not None:
        out["key"] = key.decode()
    return out


def read_bundle(text: str) -> dict[str, Any]:
    """A bundle checked: its version, name, URL, and certificates that parse and chain."""
    hint = "use the file hutch gateway issue wrote"
    try:
        doc = json.loads(text)
    except ValueError:
        raise InvalidError("the bundle is not JSON", hint=hint) from None
    if not isinstance(doc, dict) or doc.get("hutch_profile") != BUNDLE_VERSION:
        raise InvalidError("not a hutch profile bundle (or of another version)", hint=hint)
    for field in ("name", "url", "ca", "cert"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            raise InvalidError(f"the bundle has no {field}", hint=hint)
    check_name(doc["name"], "the bundle's name")
    if not doc["url"].startswith("https://"):
        raise InvalidError(f"the bundle's url {doc['url']!r} is not https://", hint="issue it again with --url https://HOST:PORT")
    try:
        ca = x509.load_pem_x509_certificate(doc["ca"].encode())
        cert = x509.load_pem_x509_certificate(doc["cert"].encode())
        if "key" in doc:
            serialization.load_pem_private_key(str(doc["key"]).encode(), password=None)
    except (ValueError, TypeError):
        raise InvalidError("the bundle's certificates or key do not parse", hint=hint) from None
    try:
        cert.verify_directly_issued_by(ca)
    except Exception as exc:  # noqa: BLE001 - InvalidSignature, or a key type that cannot sign
        raise InvalidError(f"the bundle's certificate was not issued by its CA ({exc.__class__.__name__})", hint=hint) from None
    return doc


def peer_fingerprint(der: bytes | None) -> str | None:
    return fingerprint(der) if der else None


def describe(der: bytes) -> dict[str, Any]:
    """What a log or an error may say of a presented certificate (never the key)."""
    cert = x509.load_der_x509_certificate(der)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return {"name": str(cns[0].value) if cns else "", "fingerprint": fingerprint(der)}
