"""What the local provider asks a sandbox's agent: runs, processes, files, the proxy listener.

Mixed into :class:`hutch.providers.local.LocalProvider`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import HutchError, InternalError, UnavailableError
from hutch.models import FileEntry, NetworkPolicy, RawOutput, SandboxRecord
from hutch.providers.local import runs, userns
from hutch.providers.local.agent import wire
from hutch.providers.local.channel import Channel
from hutch.providers.local.egress import PORT, Egress
from hutch.providers.local.placeholders import Vault

NET, EGRESS = "/.hutch/net", "egress.sock"  # gvisor: where the proxy's unix socket is inside, and its name


def relay_socket(net: Path) -> socket.socket:
    """The proxy's unix socket in a gvisor sandbox's ``net`` directory (made anew: a restarted daemon's),
    for the sandbox's agent and gofer only (the directory's owner and group)."""
    path = net / EGRESS
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(str(path))
        st = net.stat()
        os.chown(path, st.st_uid, st.st_gid)
        os.chmod(path, 0o660)
        sock.listen(256)
    except BaseException:
        sock.close()
        raise
    return sock


def _with_socket(agent_socket: str, request: dict[str, Any]) -> tuple[socket.socket | None, str]:
    """Ask the agent ``request`` whose answer carries a descriptor: the socket, or None and why not."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as conn:
        conn.settimeout(10.0)
        conn.connect(agent_socket)
        conn.sendall(wire.message(request))
        reader = wire.Reader()
        got, fds = None, []
        while got is None:
            chunk, more, _, _ = socket.recv_fds(conn, 65536, 1)
            fds += more
            if not chunk:
                break
            reader.feed(chunk)
            got = reader.next()
        for extra in fds[1:]:
            os.close(extra)
        if fds:
            return socket.socket(fileno=fds[0]), ""
        why = "no answer"
        if got is not None and got[0] == wire.MESSAGE:
            reply = wire.decode(got[1])
            why = HutchError.from_dict(reply).message if reply["type"] == "error" else "no socket came"
        return None, why


class AgentOpsMixin:
    settings: Settings
    egress: Egress
    _planned: Callable[[SandboxRecord], dict[str, Any]]
    _raw: Callable[[dict[str, Any], bytes, bytes, bool], RawOutput]

    def check_exec_user(self, rec: SandboxRecord, user: str) -> None:
        """ExecUsersProvider: only a sandbox whose agent is root in a namespace of its own users switches."""
        userns.check_exec_user(rec.id, rec.data, user)

    def _configure(self, env: dict[str, str], secrets: dict[str, str]) -> dict[str, Any]:
        """The agent's ``configure``: the sandbox's environment and secrets, how long a spare waits."""
        return {"type": "configure", "env": env, "secrets": secrets, "spare_idle": self.settings.spare_idle}

    async def _configure_new(self, sock: str, rec: SandboxRecord, env: dict[str, str], placeholders: dict[str, str]) -> None:
        """A new sandbox's first ``configure``: its base ``env`` and the request's, its secrets and their
        ``placeholders``. A pool member waits in the pool as lean as any idle sandbox (the idle helper):
        a hand-out's first plain run is the helper's own, with no agent start to wait for."""
        configure = self._configure(env | rec.spec.env, rec.spec.secrets | placeholders)
        async with Channel(sock) as ch:
            await ch.request(configure, timeout=10.0)

    # -- network -----------------------------------------------------------------------

    async def _listen(self, sandbox_id: str, agent_socket: str, policy: NetworkPolicy) -> None:
        """The proxy's listener, made by the agent inside the sandbox's network namespace (gvisor: a unix
        socket of the daemon's, which the agent's relay inside carries the port's connections to)."""
        net = Path(agent_socket).parent.parent / "gvisor" / "net"
        if net.is_dir():
            await self.egress.open(sandbox_id, await asyncio.to_thread(relay_socket, net), policy)
            async with Channel(agent_socket) as ch:
                await ch.request({"type": "listen", "port": PORT, "forward": f"{NET}/{EGRESS}"}, timeout=10.0)
            return

        def take() -> socket.socket:
            sock, why = _with_socket(agent_socket, {"type": "listen", "port": PORT})
            if sock is not None:
                return sock
            raise UnavailableError(
                f"the sandbox could not open its proxy port: {why}",
                hint=f"something in the sandbox may hold 127.0.0.1:{PORT}; recreate the sandbox",
            )

        try:
            sock = await asyncio.to_thread(take)
        except OSError as exc:
            raise UnavailableError(f"cannot reach the sandbox to open its network: {exc}", hint="see hutch get") from exc
        await self.egress.open(sandbox_id, sock, policy)

    async def connect_port(self, rec: SandboxRecord, port: int) -> socket.socket:
        """A connection to 127.0.0.1:``port`` inside the sandbox, made by its agent there (the
        sandbox's network namespace has only its own loopback) and handed over."""
        try:
            sock, why = await asyncio.to_thread(_with_socket, rec.data["socket"], {"type": "connect", "port": port})
        except OSError as exc:
            raise UnavailableError(f"the sandbox is not answering: {exc}", hint="see hutch get") from exc
        if sock is not None:
            sock.setblocking(False)
            return sock
        if "unknown request" in why:
            raise UnavailableError(
                f"sandbox {rec.id} was made by an older hutch whose agent cannot connect to its ports",
                hint="recreate the sandbox to expose its ports",
            )
        raise UnavailableError(why, hint=f"start a server on port {port} inside the sandbox (e.g. python3 -m http.server {port})")

    async def set_network(self, rec: SandboxRecord) -> None:
        """Apply the record's policy now: new connections see it at once, nothing restarts."""
        policy = rec.spec.network
        if rec.spec.secret_hosts and rec.id not in self.egress.vaults:  # a restarted daemon: placeholders, no values
            sdir = Path(self._planned(rec)["dir"])
            self.egress.arm(rec.id, Vault.restore(rec.spec, rec.data.get("placeholders") or {}, sdir))
        if policy.mode == "none":
            await self.egress.close(rec.id)
            async with Channel(rec.data["socket"]) as ch:
                await ch.request({"type": "unlisten"}, timeout=10.0)
        elif not self.egress.update(rec.id, policy):
            await self._listen(rec.id, rec.data["socket"], policy)

    # -- runs ------------------------------------------------------------------------

    def _runs_dir(self, rec: SandboxRecord) -> Path:
        return Path(self._planned(rec)["dir"]) / "runs"

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        status = runs.read_status(self._runs_dir(rec), run_id)
        return None if status is None else self._raw(status, b"", b"", False)

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        return runs.read_range(self._runs_dir(rec), [run_id, stream], offset, limit)

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        data, size = runs.read_range(self._runs_dir(rec), ["transcript"], offset, max(limit, runs.HEADER))
        records, next_offset = runs.parse_transcript(data, offset)
        if not records and len(data) >= runs.HEADER:  # one record larger than limit: return it whole
            need = runs.record_size(data)
            if need:
                data, size = runs.read_range(self._runs_dir(rec), ["transcript"], offset, need)
                records, next_offset = runs.parse_transcript(data, offset)
        return records, next_offset, size

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        async with Channel(rec.data["socket"]) as ch:
            reply = await ch.request({"type": "runs"}, timeout=10.0)
        return {str(r) for r in reply.get("alive", [])}

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        async with Channel(rec.data["socket"]) as ch:
            reply = await ch.request({"type": "kill", "run_id": run_id, "signal": sig}, timeout=30.0)
        return bool(reply.get("was_running"))

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        async with Channel(rec.data["socket"]) as ch:
            reply = await ch.request({"type": "ps"}, timeout=10.0)
        return list(reply.get("processes", []))

    # -- files -----------------------------------------------------------------------

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]:
        data, truncated, _ = await self.read_range(rec, path, 0, limit)
        return data, truncated

    async def read_range(self, rec: SandboxRecord, path: str, offset: int, limit: int) -> tuple[bytes, bool, int]:
        """``limit`` bytes from ``offset``, whether more follow, and the file's size."""
        async with Channel(rec.data["socket"]) as ch:
            reply = await ch.request({"type": "read", "path": path, "limit": limit, "offset": offset})
            size = int(reply["size"])
            if not 0 <= size <= limit:
                raise InternalError(f"the sandbox agent announced {size} bytes for a read capped at {limit}")
            data = await ch.recv_data(size)
        return data, bool(reply.get("truncated")), int(reply.get("total", offset + size))

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None:
        async with Channel(rec.data["socket"]) as ch:
            await ch.request({"type": "write", "path": path, "mode": mode}, data)

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]:
        async with Channel(rec.data["socket"]) as ch:
            reply = await ch.request({"type": "list", "path": path})
        return [FileEntry(**e) for e in reply["entries"]]
