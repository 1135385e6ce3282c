"""The Python SDK: ``Sandbox`` and ``AsyncSandbox``, kept in parity by a test.

    with hutch.Sandbox.create(memory="512M") as sbx:
        r = sbx.exec("echo hi")
        print(r.exit_code, r.stdout)

A non-zero exit of the workload never raises: read ``exit_code`` and ``status``.
hutch's own failures raise :class:`hutch.HutchError` (with ``kind`` and ``hint``).
"""

from __future__ import annotations

import base64
import builtins
import os
from typing import Any, Literal, overload

from hutch.client import AsyncClient, Client
from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.models import NetworkPolicy
from hutch.sdk_pty import AsyncPty, Pty, _attach_uri, _pty_start
from hutch.sdk_results import ExecResult, FileInfo, OutputChunk, _data
from hutch.sdk_runs import AsyncRun, AsyncRuns, Run, Runs
from hutch.sdk_workspace import AsyncSandboxWorkspace, SandboxWorkspace

__all__ = [
    "AsyncFiles",
    "AsyncPty",
    "AsyncRun",
    "AsyncRuns",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "Files",
    "OutputChunk",
    "Pty",
    "Run",
    "Runs",
    "Sandbox",
]


def _spec(**kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        k: v for k, v in kw.items() if k in ("name", "env", "labels", "workdir", "provider") and v is not None
    }
    limits = {k: kw[k] for k in ("memory", "pids", "cpus") if kw.get(k) is not None}
    if limits:
        spec["limits"] = limits
    if kw.get("mounts"):
        spec["mounts"] = [_mount(m) for m in kw["mounts"]]
    if kw.get("network") or kw.get("allow_hosts") or kw.get("allow_ports") or kw.get("allow_cidrs"):
        policy = NetworkPolicy.build(
            kw.get("network"), kw.get("allow_hosts") or (), kw.get("allow_ports") or (), kw.get("allow_cidrs") or ()
        )
        spec["network"] = policy.model_dump(mode="json")
    if kw.get("secrets"):
        spec["secrets"] = dict(kw["secrets"])
    return spec


def _mount(m: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(m, dict):
        return m
    parts = m.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise InvalidError(f"invalid mount {m!r}", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")
    source = os.path.abspath(os.path.expanduser(parts[0]))
    return {"source": source, "target": parts[1], "readonly": len(parts) > 2 and parts[2] == "ro"}


def _with_defaults(spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Unset limits come from Settings (HUTCH_MEMORY, config.toml ...), as in the CLI."""
    limits = {"memory": settings.memory, "pids": settings.pids, "cpus": settings.cpus} | spec.get("limits", {})
    return spec | {"limits": limits}


def _exec_req(
    command: str | list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    timeout: float | None,
    stdin: bytes | str | None,
    max_output: int | None,
    idle_timeout: float | None = None,
    background: bool = False,
    secrets: dict[str, str] | None = None,
    redact: bool = True,
) -> dict[str, Any]:
    req: dict[str, Any] = {"command": command, "env": env or {}, "cwd": cwd, "timeout": timeout}
    req |= {"idle_timeout": idle_timeout, "background": background, "secrets": secrets or {}, "redact": redact}
    if stdin is not None:
        raw = stdin.encode() if isinstance(stdin, str) else stdin
        req |= {"stdin": base64.b64encode(raw).decode(), "stdin_base64": True}
    if max_output is not None:
        req["max_output"] = max_output
    return req


def _policy_change(
    network: str | None,
    allow_hosts: list[str] | None,
    deny_hosts: list[str] | None,
    remove_hosts: list[str] | None,
    ports: list[int] | None,
    cidrs: list[str] | None,
) -> dict[str, Any]:
    change: dict[str, Any] = {"mode": network, "allow_hosts": allow_hosts, "deny_hosts": deny_hosts}
    change |= {"remove_hosts": remove_hosts, "ports": ports, "cidrs": cidrs}
    return {k: v for k, v in change.items() if v}


def _matches(info: dict[str, Any], labels: dict[str, str] | None, state: str | None) -> bool:
    have = info.get("spec", {}).get("labels", {})
    return (state is None or info.get("state") == state) and all(have.get(k) == v for k, v in (labels or {}).items())


class Files:
    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> dict[str, Any]:
        return self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    def read(self, path: str) -> bytes:
        return self._sbx.client.read_file(self._sbx.id, path)[0]

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in self._sbx.client.list_files(self._sbx.id, path)]


class Sandbox(SandboxWorkspace):
    """A sandbox, driven through the local daemon (started on demand) or a gateway."""

    def __init__(self, info: dict[str, Any], client: Client) -> None:
        self.info = info
        self.client = client
        self.files = Files(self)
        self.runs = Runs(self)

    @property
    def _cap(self) -> int:
        return self.client.settings.output_cap

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def name(self) -> str | None:
        return self.info.get("name")

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r}, state={self.info.get('state')!r})"

    @classmethod
    def create(
        cls,
        *,
        name: str | None = None,
        memory: str | int | None = None,
        pids: int | None = None,
        cpus: float | None = None,
        env: dict[str, str] | None = None,
        mounts: builtins.list[str] | None = None,
        labels: dict[str, str] | None = None,
        workdir: str | None = None,
        provider: str | None = None,
        network: str | None = None,
        allow_hosts: builtins.list[str] | None = None,
        allow_ports: builtins.list[int] | None = None,
        allow_cidrs: builtins.list[str] | None = None,
        secrets: dict[str, str] | None = None,
        settings: Settings | None = None,
    ) -> Sandbox:
        client = Client(settings)
        spec = _spec(
            network=network,
            allow_hosts=allow_hosts,
            allow_ports=allow_ports,
            allow_cidrs=allow_cidrs,
            secrets=secrets,
            name=name,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            mounts=mounts,
            labels=labels,
            workdir=workdir,
            provider=provider or client.settings.provider,
        )
        return cls(client.create(_with_defaults(spec, client.settings)), client)

    @classmethod
    def connect(cls, ref: str, *, settings: Settings | None = None) -> Sandbox:
        client = Client(settings)
        return cls(client.get(ref), client)

    @classmethod
    def list(
        cls,
        *,
        labels: dict[str, str] | None = None,
        state: str | None = None,
        include_all: bool = False,
        settings: Settings | None = None,
    ) -> builtins.list[Sandbox]:
        """Sandboxes (live ones unless ``include_all`` or a ``state`` is given), optionally
        only those carrying all of ``labels`` or in ``state``."""
        client = Client(settings)
        infos = client.list(include_all or state is not None)
        return [cls(info, client) for info in infos if _matches(info, labels, state)]

    def refresh(self) -> dict[str, Any]:
        self.info = self.client.get(self.id)
        return self.info

    @property
    def network(self) -> dict[str, Any]:
        """The network policy as of the last refresh: mode, allow_hosts, deny_hosts, ports, cidrs."""
        return dict(self.info["spec"].get("network") or {"mode": "none"})

    def policy(
        self,
        *,
        network: str | None = None,
        allow_hosts: builtins.list[str] | None = None,
        deny_hosts: builtins.list[str] | None = None,
        remove_hosts: builtins.list[str] | None = None,
        allow_ports: builtins.list[int] | None = None,
        allow_cidrs: builtins.list[str] | None = None,
    ) -> dict[str, Any]:
        """Show or change the network policy, live (new connections follow it at once).

        ``network``: none | allowlist | open. Hosts are names or ``*.suffix``. Returns the
        policy now in force; every change is recorded as a ``policy_changed`` event.
        """
        change = _policy_change(network, allow_hosts, deny_hosts, remove_hosts, allow_ports, allow_cidrs)
        self.info = self.client.policy(self.id, change) if change else self.client.get(self.id)
        return self.network

    @overload
    def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: Literal[False] = False,
    ) -> ExecResult: ...

    @overload
    def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: Literal[True],
    ) -> Run: ...

    def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: bool = False,
    ) -> ExecResult | Run:
        """Run a command. Returns an :class:`ExecResult`, or a :class:`Run` with ``background=True``.

        A non-zero exit never raises: read ``exit_code`` and ``status``.
        """
        cap = self._cap if max_output is None else max_output
        req = _exec_req(command, env, cwd, timeout, stdin, cap, idle_timeout, background, secrets, redact)
        if background:
            return Run(self.client.exec(self.id, req), self.client)
        return ExecResult.from_dict(self.client.exec(self.id, req))

    def pty(
        self,
        command: str | builtins.list[str] | None = None,
        *,
        rows: int = 24,
        cols: int = 80,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> Pty:
        """A terminal session running ``command`` (default: a login shell); ``timeout`` as for exec."""
        from websockets.sync.client import unix_connect

        self.client.health()
        # entered by hand: the session outlives this call and Pty.close() ends it
        ws = unix_connect(str(self.client.settings.socket_path), uri=_attach_uri(self.id), max_size=None).__enter__()
        ws.send(_pty_start(command, rows, cols, env, cwd, timeout))
        return Pty(ws)

    def destroy(self) -> dict[str, Any]:
        return self.client.destroy(self.id)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


class AsyncFiles:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> dict[str, Any]:
        return await self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    async def read(self, path: str) -> bytes:
        return (await self._sbx.client.read_file(self._sbx.id, path))[0]

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode()

    async def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in await self._sbx.client.list_files(self._sbx.id, path)]


class AsyncSandbox(AsyncSandboxWorkspace):
    """The asynchronous twin of :class:`Sandbox`."""

    def __init__(self, info: dict[str, Any], client: AsyncClient) -> None:
        self.info = info
        self.client = client
        self.files = AsyncFiles(self)
        self.runs = AsyncRuns(self)

    @property
    def _cap(self) -> int:
        return self.client.settings.output_cap

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def name(self) -> str | None:
        return self.info.get("name")

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, name={self.name!r}, state={self.info.get('state')!r})"

    @classmethod
    async def create(
        cls,
        *,
        name: str | None = None,
        memory: str | int | None = None,
        pids: int | None = None,
        cpus: float | None = None,
        env: dict[str, str] | None = None,
        mounts: builtins.list[str] | None = None,
        labels: dict[str, str] | None = None,
        workdir: str | None = None,
        provider: str | None = None,
        network: str | None = None,
        allow_hosts: builtins.list[str] | None = None,
        allow_ports: builtins.list[int] | None = None,
        allow_cidrs: builtins.list[str] | None = None,
        secrets: dict[str, str] | None = None,
        settings: Settings | None = None,
    ) -> AsyncSandbox:
        client = AsyncClient(settings)
        spec = _spec(
            network=network,
            allow_hosts=allow_hosts,
            allow_ports=allow_ports,
            allow_cidrs=allow_cidrs,
            secrets=secrets,
            name=name,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            mounts=mounts,
            labels=labels,
            workdir=workdir,
            provider=provider or client.settings.provider,
        )
        return cls(await client.create(_with_defaults(spec, client.settings)), client)

    @classmethod
    async def connect(cls, ref: str, *, settings: Settings | None = None) -> AsyncSandbox:
        client = AsyncClient(settings)
        return cls(await client.get(ref), client)

    @classmethod
    async def list(
        cls,
        *,
        labels: dict[str, str] | None = None,
        state: str | None = None,
        include_all: bool = False,
        settings: Settings | None = None,
    ) -> builtins.list[AsyncSandbox]:
        """Sandboxes (live ones unless ``include_all`` or a ``state`` is given), optionally
        only those carrying all of ``labels`` or in ``state``."""
        client = AsyncClient(settings)
        infos = await client.list(include_all or state is not None)
        return [cls(info, client) for info in infos if _matches(info, labels, state)]

    async def refresh(self) -> dict[str, Any]:
        self.info = await self.client.get(self.id)
        return self.info

    @property
    def network(self) -> dict[str, Any]:
        """The network policy as of the last refresh: mode, allow_hosts, deny_hosts, ports, cidrs."""
        return dict(self.info["spec"].get("network") or {"mode": "none"})

    async def policy(
        self,
        *,
        network: str | None = None,
        allow_hosts: builtins.list[str] | None = None,
        deny_hosts: builtins.list[str] | None = None,
        remove_hosts: builtins.list[str] | None = None,
        allow_ports: builtins.list[int] | None = None,
        allow_cidrs: builtins.list[str] | None = None,
    ) -> dict[str, Any]:
        """Show or change the network policy, live (new connections follow it at once).

        ``network``: none | allowlist | open. Hosts are names or ``*.suffix``. Returns the
        policy now in force; every change is recorded as a ``policy_changed`` event.
        """
        change = _policy_change(network, allow_hosts, deny_hosts, remove_hosts, allow_ports, allow_cidrs)
        self.info = await self.client.policy(self.id, change) if change else await self.client.get(self.id)
        return self.network

    @overload
    async def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: Literal[False] = False,
    ) -> ExecResult: ...

    @overload
    async def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: Literal[True],
    ) -> AsyncRun: ...

    async def exec(
        self,
        command: str | builtins.list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        idle_timeout: float | None = None,
        secrets: dict[str, str] | None = None,
        redact: bool = True,
        background: bool = False,
    ) -> ExecResult | AsyncRun:
        """Run a command: an :class:`ExecResult`, or an :class:`AsyncRun` with ``background=True``."""
        cap = self._cap if max_output is None else max_output
        req = _exec_req(command, env, cwd, timeout, stdin, cap, idle_timeout, background, secrets, redact)
        if background:
            return AsyncRun(await self.client.exec(self.id, req), self.client)
        return ExecResult.from_dict(await self.client.exec(self.id, req))

    async def pty(
        self,
        command: str | builtins.list[str] | None = None,
        *,
        rows: int = 24,
        cols: int = 80,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> AsyncPty:
        """A terminal session running ``command`` (default: a login shell); ``timeout`` as for exec."""
        from websockets.asyncio.client import unix_connect

        await self.client.get(self.id)
        ws = await unix_connect(str(self.client.settings.socket_path), uri=_attach_uri(self.id), max_size=None)
        await ws.send(_pty_start(command, rows, cols, env, cwd, timeout))
        return AsyncPty(ws)

    async def destroy(self) -> dict[str, Any]:
        return await self.client.destroy(self.id)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.destroy()
        await self.client.close()
