"""The test server's SSH front: what an image with sshd behind the platform's ``tls`` handler does.

One TLS listener on 127.0.0.1 (a self-made CA, ``*.ukc.test`` certificate) routes by SNI to
the instance whose fqdn was asked for; the instance must have been created with a service
on port 2222 with the ``tls`` handler. The SSH server authenticates against the public keys
the instance received in its env (``SSH_AUTHORIZED_KEYS``) and runs the session's command in
the instance's real local sandbox (the backend's exec path), streaming its output and
passing its exit code through.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hutch.testing.unikraft.testbed import Command, Instance

if TYPE_CHECKING:
    from hutch.testing.unikraft.testbed import State

DOMAIN = "ukc.test"


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a ``*.ukc.test`` server certificate it signed: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ukc test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"*.{DOMAIN}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"*.{DOMAIN}")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = d / "ca.pem", d / "cert.pem", d / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    paths[2].write_bytes(pem)
    paths[2].chmod(0o600)
    return paths


def has_ssh_service(inst: Instance) -> bool:
    services = (inst.body.get("service_group") or {}).get("services") or []
    return any(isinstance(s, dict) and s.get("port") == 2222 and "tls" in (s.get("handlers") or []) for s in services)


class _Tunnel:
    """asyncssh's listener, but every accepted connection is TLS first (SNI recorded)."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.server: asyncio.Server | None = None

    async def create_server(self, factory: Any, host: str, port: int) -> asyncio.Server:
        loop = asyncio.get_running_loop()  # asyncssh's tunnel factory takes the original host and port
        self.server = await loop.create_server(lambda: factory(host, port), "127.0.0.1", 0, ssl=self.ctx)
        return self.server


class SSHFront:
    def __init__(self, state: State, home: Path) -> None:
        self.state = state
        self.ca_file, cert, key = make_certs(home)
        self.sni: dict[int, str] = {}
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        ctx.sni_callback = self._on_sni
        self.tunnel = _Tunnel(ctx)
        assert state.backend is not None
        self.backend = state.backend
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.acceptor = self.backend.call(self._listen())
        assert self.tunnel.server is not None
        self.port = int(self.tunnel.server.sockets[0].getsockname()[1])

    def _on_sni(self, sslobj: Any, name: str | None, ctx: Any) -> None:
        self.sni[id(sslobj)] = name or ""

    async def _listen(self) -> Any:
        front = self

        class Server(asyncssh.SSHServer):
            inst: Instance | None = None

            def connection_made(self, conn: Any) -> None:
                name = front.sni.pop(id(conn.get_extra_info("ssl_object")), "")
                with front.state.lock:
                    found = [i for i in front.state.instances.values() if f"{i.name}.{DOMAIN}" == name]
                self.inst = found[0] if found and has_ssh_service(found[0]) else None
                self.conn = conn

            def begin_auth(self, username: str) -> bool:
                if self.inst is None:  # no such instance, or no TLS service on 2222: nothing listens
                    self.conn.close()
                    return True
                keys = str((self.inst.body.get("env") or {}).get("SSH_AUTHORIZED_KEYS") or "")
                self.conn.set_authorized_keys(asyncssh.import_authorized_keys(keys) if keys.strip() else None)
                return True

            def public_key_auth_supported(self) -> bool:
                return True

        async def session(process: Any) -> None:
            inst = process.get_extra_info("connection").get_owner().inst
            await front._session(inst, process)

        return await asyncssh.listen(
            "ukc-ssh",
            0,
            tunnel=self.tunnel,
            server_factory=Server,
            server_host_keys=[self.host_key],
            process_factory=session,
            encoding=None,
            allow_scp=False,
            line_editor=False,  # like sshd: bytes go to the command as typed
        )

    async def _session(self, inst: Instance, process: Any) -> None:
        cmd = Command(process.command or "sh", "/", None)
        cmd.run_env = dict(inst.body.get("env") or {})
        inst.commands[cmd.uuid] = cmd
        self.backend.start(inst, cmd)

        async def feed() -> None:
            try:
                while data := await process.stdin.read(65536):
                    cmd.inbox.put_nowait({"stdin": data})
            except (asyncssh.Error, OSError):
                pass
            cmd.inbox.put_nowait({"eof": True})

        feeder = asyncio.ensure_future(feed())
        sent = {"stdout": 0, "stderr": 0}
        while True:
            done = cmd.done.is_set()
            for name, writer in (("stdout", process.stdout), ("stderr", process.stderr)):
                buf = cmd.out[name]
                if len(buf) > sent[name]:
                    writer.write(bytes(buf[sent[name] :]))
                    sent[name] = len(buf)
            if done:
                break
            await asyncio.sleep(0.02)
        feeder.cancel()
        process.exit(cmd.exitcode if cmd.exitcode is not None else 255)

    def close(self) -> None:
        self.backend.loop.call_soon_threadsafe(self.acceptor.close)
