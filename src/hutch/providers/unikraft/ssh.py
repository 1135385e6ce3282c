"""The SSH path of unikraft sandboxes: a per-sandbox key, TLS-wrapped SSH, host keys pinned.

``hutch create --provider unikraft --ssh`` makes an ed25519 key pair; the private key stays
owner-only under ``$HUTCH_HOME/ssh/<sandbox id>/id_ed25519`` (directory 0700, file 0600), the
public key goes to the image in the instance env ``SSH_AUTHORIZED_KEYS``, and the instance
gets a service on port 2222 with the platform's ``tls`` handler (the image runs an SSH server
on 2222 that trusts ``SSH_AUTHORIZED_KEYS``). ``hutch ssh`` opens TLS to the instance fqdn
(SNI = fqdn), runs SSH over that stream (what ``openssl s_client`` as ProxyCommand does),
and pins the server's host key on first use in ``known_host`` next to the key.

asyncssh (``pip install 'hutch[ssh]'``) is imported only here, and only when used.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import ssl
import stat
import sys
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from hutch.errors import InvalidError, NotFoundError, PolicyError, UnavailableError
from hutch.models import SandboxRecord
from hutch.providers.unikraft.settings import UnikraftSettings

SSH_PORT = 2222
KEY_ENV = "SSH_AUTHORIZED_KEYS"
USER = "root"


def _asyncssh() -> Any:
    try:
        with warnings.catch_warnings():  # asyncssh names DSA types, which newer cryptography warns about on stderr
            warnings.simplefilter("ignore")  # (CryptographyDeprecationWarning is a UserWarning)
            import asyncssh
    except ImportError:
        raise InvalidError("the SSH path needs the asyncssh package", hint="pip install 'hutch[ssh]' (asyncssh>=2.14)") from None
    return asyncssh


def key_dir(home: Path, sandbox_id: str) -> Path:
    return home / "ssh" / sandbox_id


def make_key(home: Path, sandbox_id: str) -> str:
    """A fresh ed25519 key for the sandbox; returns its public key (OpenSSH format)."""
    asyncssh = _asyncssh()
    d = key_dir(home, sandbox_id)
    d.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.mkdir(mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"hutch-{sandbox_id}")
    path = d / "id_ed25519"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key())
    public = key.export_public_key().decode().strip()
    (d / "id_ed25519.pub").write_text(public + "\n")
    return str(public)


def remove_keys(home: Path, sandbox_id: str) -> None:
    shutil.rmtree(key_dir(home, sandbox_id), ignore_errors=True)


def service_group() -> dict[str, Any]:
    """The instance's ephemeral service group: TLS on 2222, forwarded to the image's sshd on 2222."""
    return {"services": [{"port": SSH_PORT, "destination_port": SSH_PORT, "handlers": ["tls"]}]}


def fqdn_of(inst: dict[str, Any]) -> str | None:
    """The public fqdn of a create/lookup answer (``service_group.domains[0].fqdn``)."""
    for dom in (inst.get("service_group") or {}).get("domains") or []:
        if isinstance(dom, dict) and dom.get("fqdn"):
            return str(dom["fqdn"]).rstrip(".")
    return None


async def ssh_endpoint(inst: dict[str, Any], lookup: Callable[[], Awaitable[dict[str, Any] | None]]) -> dict[str, Any]:
    """Where ``hutch ssh`` connects: the instance fqdn (from the create answer, else a
    lookup: an adopted instance comes from the listing) and the TLS service port."""
    fqdn = fqdn_of(inst) or fqdn_of(await lookup() or {})
    if fqdn is None:
        raise UnavailableError("the instance has no public fqdn for its SSH service", hint="check the service group")
    return {"fqdn": fqdn, "port": SSH_PORT, "user": USER}


# -- the client ------------------------------------------------------------------------------


class TLSTunnel:
    """An asyncssh tunnel: the SSH stream runs inside TLS to ``address`` with SNI ``fqdn``."""

    def __init__(self, fqdn: str, address: tuple[str, int], ca_file: str) -> None:
        self.fqdn, self.address = fqdn, address
        self.ctx = ssl.create_default_context(cafile=ca_file or None)

    async def create_connection(self, factory: Any, host: str, port: int) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.create_connection(
                factory, self.address[0], self.address[1], ssl=self.ctx, server_hostname=self.fqdn
            )
        except ssl.SSLError as exc:
            raise UnavailableError(f"TLS to {self.fqdn} failed: {exc}", hint="check the instance's service and CA") from exc
        except OSError as exc:
            raise UnavailableError(
                f"cannot reach {self.fqdn}:{self.address[1]}: {exc}", hint="the instance may be waking up; retry"
            ) from exc


def _client_class(pin: Path) -> Any:
    _asyncssh()
    from asyncssh import SSHClient

    class PinningClient(SSHClient):
        changed: str | None = None

        def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
            seen = key.export_public_key().decode().strip()
            if not pin.exists():
                pin.write_text(seen + "\n")
                os.chmod(pin, 0o600)
                return True
            known = pin.read_text().strip()
            if known == seen:
                return True
            type(self).changed = seen
            return False

    return PinningClient


class Target:
    """Where and how to reach one sandbox's SSH server."""

    def __init__(self, home: Path, rec: Mapping[str, Any], connect: str = "", ca_file: str = "") -> None:
        ssh = rec.get("ssh") or {}
        if rec.get("provider") != "unikraft" or not ssh:
            raise InvalidError(
                f"sandbox {rec.get('name') or rec.get('id')} was not created with --ssh",
                hint="create it with hutch create --provider unikraft --ssh",
            )
        self.id = str(rec["id"])
        self.fqdn = str(ssh["fqdn"])
        self.port = int(ssh.get("port") or SSH_PORT)
        self.key = key_dir(home, self.id) / "id_ed25519"
        self.pin = key_dir(home, self.id) / "known_host"
        if not self.key.exists():
            raise NotFoundError(
                f"no SSH key for {self.id} at {self.key}", hint="hutch ssh runs on the machine of the daemon that created it"
            )
        host, _, port = connect.rpartition(":") if connect else (self.fqdn, "", str(self.port))
        self.address = (host or self.fqdn, int(port or self.port))
        self.ca_file = ca_file

    async def connect(self) -> Any:
        asyncssh = _asyncssh()
        client = _client_class(self.pin)
        try:
            key = asyncssh.read_private_key(str(self.key))
        except (OSError, ValueError, asyncssh.KeyImportError) as exc:
            raise InvalidError(f"cannot read the sandbox key {self.key}: {exc}", hint="recreate the sandbox") from None
        try:
            return await asyncssh.connect(
                self.fqdn,
                self.port,
                tunnel=TLSTunnel(self.fqdn, self.address, self.ca_file),
                username=USER,
                client_keys=[key],
                known_hosts=lambda *_: ([], [], []),
                client_factory=client,
                agent_path=None,
                config=None,
                connect_timeout=30,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise PolicyError(
                f"the SSH host key of {self.fqdn} changed (pinned in {self.pin}; now {client.changed or 'another key'})",
                hint=f"if the instance really was rebuilt, reset the pin: rm {self.pin}",
            ) from None
        except asyncssh.PermissionDenied as exc:
            raise PolicyError(
                f"the SSH server refused the sandbox key: {exc.reason}", hint="check the image's contract"
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise UnavailableError(f"SSH to {self.fqdn} failed: {exc}", hint="retry; the instance may be waking up") from exc


async def run_command(target: Target, command: str, capture: bool) -> tuple[int, bytes, bytes]:
    """Run ``command``; stream to our stdout/stderr unless ``capture``. Returns (code, out, err)."""
    asyncssh = _asyncssh()
    async with await target.connect() as conn:
        if capture:
            res = await conn.run(command, encoding=None, stdin=asyncssh.DEVNULL, check=False)
            code = res.exit_status if res.exit_status is not None else 255
            return int(code), bytes(res.stdout or b""), bytes(res.stderr or b"")
        feed: dict[str, Any] = {"stdin": asyncssh.DEVNULL}
        mode = os.fstat(0).st_mode if sys.stdin is not None else 0
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # a pipe: streamed
            feed = {"stdin": os.fdopen(os.dup(0), "rb", buffering=0)}
        elif stat.S_ISREG(mode):  # a file: sent whole
            feed = {"input": sys.stdin.buffer.read()}
        sys.stdout.flush()
        out, err = os.fdopen(os.dup(1), "wb", buffering=0), os.fdopen(os.dup(2), "wb", buffering=0)  # asyncssh closes them
        res = await conn.run(command, encoding=None, stdout=out, stderr=err, check=False, **feed)
        sys.stdout.flush()
        return int(res.exit_status if res.exit_status is not None else 255), b"", b""


async def interactive(target: Target, command: str | None) -> int:
    """A shell (or ``command``) on a pty: our terminal in raw mode, resizes forwarded."""
    import signal
    import termios
    import tty

    async with await target.connect() as conn:
        size = shutil.get_terminal_size()
        term = os.environ.get("TERM", "xterm-256color")
        proc = await conn.create_process(command, term_type=term, term_size=(size.columns, size.lines), encoding=None)
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)

        def on_input() -> None:
            data = os.read(fd, 4096)
            if data:
                proc.stdin.write(data)
            else:
                proc.stdin.write_eof()
                loop.remove_reader(fd)

        def on_resize() -> None:
            s = shutil.get_terminal_size()
            proc.change_terminal_size(s.columns, s.lines)

        async def pump(stream: Any, out: Any) -> None:
            while data := await stream.read(65536):
                out.write(data)
                out.flush()

        try:
            tty.setraw(fd, termios.TCSANOW)  # keeps what was typed ahead
            loop.add_reader(fd, on_input)
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
            await asyncio.gather(pump(proc.stdout, sys.stdout.buffer), pump(proc.stderr, sys.stderr.buffer))
            await proc.wait(check=False)
        finally:
            loop.remove_reader(fd)
            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        return int(proc.exit_status if proc.exit_status is not None else 255)


class SshTransferMixin:
    """push / pull for unikraft sandboxes made with ``--ssh``: one tar stream over an SSH exec
    channel, unpacked by the image's own ``tar`` as the sandbox user (never by the daemon)."""

    config: UnikraftSettings

    def _target(self, rec: SandboxRecord) -> Target:
        if rec.ssh is None:
            raise InvalidError(
                f"push and pull on unikraft go over SSH, and sandbox {rec.name or rec.id} was not created with --ssh",
                hint="create it with hutch create --provider unikraft --ssh, or pipe a tar: tar c . | hutch ssh SBX -- tar x",
            )
        c = self.config
        return Target(c.home, rec.model_dump(mode="json"), c.ssh_connect, c.ca_file)

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        target = self._target(rec)
        wd = shlex.quote(rec.spec.workdir)
        with open(dest, "wb") as out:
            async with await target.connect() as conn:
                res = await conn.run(f"tar -C {wd} -cf - .", encoding=None, stdin=_asyncssh().DEVNULL, stdout=out, check=False)
        if res.exit_status != 0:
            raise UnavailableError(f"packing the workspace over SSH failed: {_text(res.stderr)}", hint="retry")
        return dest.stat().st_size

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        for rel in delete:
            if rel.startswith("/") or ".." in rel.split("/"):
                raise InvalidError(f"refusing to delete {rel!r}: not a path inside the workspace")
        target = self._target(rec)
        wd = shlex.quote(rec.spec.workdir)
        steps = [f"mkdir -p {wd}"]
        if delete:
            steps.append(f"cd {wd} && rm -rf -- " + " ".join(shlex.quote(p) for p in delete))
        if src is not None:
            steps.append(f"tar -C {wd} --no-same-owner -xf -")
        async with await target.connect() as conn:
            with open(src, "rb") if src is not None else open(os.devnull, "rb") as feed:
                res = await conn.run(" && ".join(steps), encoding=None, stdin=feed, check=False)
        if res.exit_status != 0:
            raise UnavailableError(f"unpacking into the workspace over SSH failed: {_text(res.stderr)}", hint="retry")


def _text(data: Any) -> str:
    raw = data if isinstance(data, bytes) else str(data or "").encode()
    return raw.decode(errors="replace").strip()[-500:] or "no message"
