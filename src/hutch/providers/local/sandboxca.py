"""A sandbox's own CA: what the egress proxy presents when it opens the HTTPS of a sandbox
that holds placeholder secrets (:mod:`.placeholders`). Only that sandbox trusts it.

Made at create with ``cryptography`` (ECDSA P-256, like :mod:`hutch.pki`). Its key stays on
the host in the sandbox's directory (0600, never inside the sandbox), so a restarted daemon
keeps intercepting. The certificate joins the sandbox's trust: a bundle (the host's CAs and
this one) at :data:`BUNDLE`, the usual variables pointing at it, and the same bundle over the
system bundle path when the sandbox's root has one (a program that ignores the variables).
The proxy presents a leaf per host, made on first use and kept in memory for a day.
"""

from __future__ import annotations

import datetime
import os
import ssl
import stat
import time
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hutch import pki
from hutch.config import Settings
from hutch.errors import HutchError
from hutch.policy import parse_ip
from hutch.providers.local import hostca
from hutch.providers.local.host import memfd

BUNDLE = "/.hutch/sandbox-ca.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian, Ubuntu, Alpine: what OpenSSL, Go and curl read
KEY_FILE, CERT_FILE = "sandbox-ca.key", "sandbox-ca.crt"
CA_DAYS = 3650
LEAF_SECONDS = 7 * 86400
LEAF_REUSE = 86400.0  # a leaf is made again after a day
MAX_LEAVES = 256


class SandboxCA:
    def __init__(self, key: pki.Key, cert: x509.Certificate) -> None:
        self.key, self.cert = key, cert
        self.leaf_key = pki.new_key()  # one key for every leaf of this sandbox
        self._contexts: OrderedDict[str, tuple[float, ssl.SSLContext]] = OrderedDict()

    @classmethod
    def new(cls, sandbox_id: str) -> SandboxCA:
        key = pki.new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"hutch sandbox {sandbox_id}")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=pki.CLOCK_SKEW))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def save(self, sdir: Path) -> None:
        fd = os.open(sdir / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pki.key_pem(self.key))
        (sdir / CERT_FILE).write_bytes(self.pem())

    @classmethod
    def load(cls, sdir: Path) -> SandboxCA | None:
        try:
            key = serialization.load_pem_private_key((sdir / KEY_FILE).read_bytes(), None)
            cert = x509.load_pem_x509_certificate((sdir / CERT_FILE).read_bytes())
        except (OSError, ValueError):
            return None
        return cls(key, cert) if isinstance(key, pki.Key) else None

    def pem(self) -> bytes:
        return pki.cert_pem(self.cert)

    def context(self, host: str) -> ssl.SSLContext:
        """The TLS server side the sandbox sees for ``host``: a leaf of this CA."""
        now = time.monotonic()
        found = self._contexts.get(host)
        if found is not None and now - found[0] < LEAF_REUSE:
            self._contexts.move_to_end(host)
            return found[1]
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])  # the proxy reads HTTP/1.1 only
        fd = memfd("leaf.pem", pki.cert_pem(self._leaf(host)) + pki.key_pem(self.leaf_key))
        try:
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        self._contexts[host] = (now, ctx)
        while len(self._contexts) > MAX_LEAVES:
            self._contexts.popitem(last=False)
        return ctx

    def _leaf(self, host: str) -> x509.Certificate:
        ip = parse_ip(host)
        san: x509.GeneralName = x509.IPAddress(ip) if ip is not None else x509.DNSName(host)
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.cert.subject)
            .public_key(self.leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=pki.CLOCK_SKEW))
            .not_valid_after(now + datetime.timedelta(seconds=LEAF_SECONDS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )


def upstream_context(ca_file: str) -> ssl.SSLContext:
    """How the proxy checks the real server: the machine's trust store, or ``ca_file`` (egress_ca)."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def bind(ca: SandboxCA, settings: Settings, image_rootfs: Path | None, fds: list[int]) -> tuple[list[str], dict[str, str]]:
    """bwrap's arguments and the environment that make the sandbox trust ``ca`` besides what the
    host trusts (the proxy checks every upstream with the host's trust: the sandbox trusts no less)."""
    try:
        with open(hostca.source(settings), "rb") as f:
            base = f.read(hostca.MAX_BYTES)
    except (HutchError, OSError):
        base = b""
    bundle = base.rstrip(b"\n") + b"\n" + ca.pem() if base else ca.pem()
    fds.append(memfd("sandbox-ca.crt", bundle))
    args = ["--perms", "0444", "--ro-bind-data", str(fds[-1]), BUNDLE]
    system = (image_rootfs / SYSTEM_BUNDLE.lstrip("/")) if image_rootfs is not None else Path(SYSTEM_BUNDLE)
    try:
        is_file = stat.S_ISREG(os.lstat(system).st_mode)
    except OSError:
        is_file = False
    if is_file:  # only over a regular file: a symbolic link in an image could point anywhere
        fds.append(memfd("ca-certificates.crt", bundle))
        args += ["--perms", "0444", "--ro-bind-data", str(fds[-1]), SYSTEM_BUNDLE]
    return args, dict.fromkeys(hostca.VARIABLES, BUNDLE)
