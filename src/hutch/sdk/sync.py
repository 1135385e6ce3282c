"""The Python SDK: ``Sandbox`` and ``AsyncSandbox``, kept in parity by a test.

    with hutch.Sandbox.create(memory="512M") as sbx:
        r = sbx.exec("echo hi")
        print(r.exit_code, r.stdout)

A non-zero exit of the workload never raises: read ``exit_code`` and ``status``.
hutch's own failures raise :class:`hutch.HutchError` (with ``kind`` and ``hint``).
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Literal, overload

from hutch.client import AsyncClient, Client
from hutch.config import Settings
from hutch.sdk.lifecycle import _AsyncLifecycle, _Lifecycle
from hutch.sdk.policy import AsyncPolicy, Policy
from hutch.sdk.pty import AsyncPty, Pty, _attach_path, _pty_start
from hutch.sdk.results import ExecResult, FileInfo, OutputChunk, _data
from hutch.sdk.runs import AsyncRun, AsyncRuns, Run, Runs
from hutch.sdk.workspace import AsyncSandboxWorkspace, SandboxWorkspace
from hutch.wire.build import exec_request, sandbox_spec

if TYPE_CHECKING:
    from hutch import wire

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


class Files:
    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> wire.FileWritten:
        return self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    def read(self, path: str) -> bytes:
        return self._sbx.client.read_file(self._sbx.id, path)[0]

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in self._sbx.client.list_files(self._sbx.id, path)]


class Sandbox(SandboxWorkspace, _Lifecycle):
    """A sandbox, driven through the local daemon (started on demand) or a gateway."""

    def __init__(self, info: wire.SandboxRecord, client: Client) -> None:
        self.info = info
        self.client = client
        self.files = Files(self)
        self.runs = Runs(self)
        self.policy = Policy(self)
        self._forks = []

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
        ttl: str | float | None = None,
        idle_timeout: str | float | None = None,
        on_expire: Literal["destroy", "pause"] | None = None,
        require_approval: builtins.list[str] | None = None,
        image: str | None = None,
        unikraft_metro: str | None = None,
        settings: Settings | None = None,
    ) -> Sandbox:
        client = Client(settings)
        spec = sandbox_spec(
            client.settings,
            network=network,
            allow_hosts=allow_hosts or (),
            allow_ports=allow_ports or (),
            allow_cidrs=allow_cidrs or (),
            secrets=secrets,
            image=image,
            metro=unikraft_metro,
            name=name,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            mounts=mounts or (),
            labels=labels,
            workdir=workdir,
            provider=provider,
            ttl=ttl,
            idle_timeout=idle_timeout,
            on_expire=on_expire,
            require_approval=require_approval or (),
        )
        return cls(client.create(spec), client)

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
        return [cls(info, client) for info in client.list(include_all, labels, state)]

    def refresh(self) -> wire.SandboxRecord:
        self.info = self.client.get(self.id)
        return self.info

    @property
    def network(self) -> wire.NetworkPolicy:
        """The network policy as of the last refresh: mode, allow_hosts, deny_hosts, ports, cidrs."""
        return self.info["spec"].get("network") or {"mode": "none"}

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
        approval: str | None = None,
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
        approval: str | None = None,
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
        approval: str | None = None,
    ) -> ExecResult | Run:
        """Run a command. Returns an :class:`ExecResult`, or a :class:`Run` with ``background=True``.

        A non-zero exit never raises: read ``exit_code`` and ``status``.
        """
        cap = self._cap if max_output is None else max_output
        req = exec_request(
            command,
            env=env,
            cwd=cwd,
            timeout=timeout,
            stdin=stdin,
            max_output=cap,
            idle_timeout=idle_timeout,
            secrets=secrets,
            redact=redact,
            approval=approval,
        )
        if background:
            return Run(self.client.start(self.id, req), self.client)
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
        self.client.health()
        # the session outlives this call and Pty.close() ends it
        ws = self.client.endpoint.ws_connect(_attach_path(self.id))
        ws.send(_pty_start(command, rows, cols, env, cwd, timeout))
        return Pty(ws)

    def destroy(self, approval: str | None = None) -> wire.DestroyResult:
        return self.client.destroy(self.id, approval)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        """Destroy the sandbox, and the children ``fork`` made from it (unless ``keep=True``)."""
        try:
            self._destroy_forks()
        finally:
            self.destroy()


class AsyncFiles:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> wire.FileWritten:
        return await self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    async def read(self, path: str) -> bytes:
        return (await self._sbx.client.read_file(self._sbx.id, path))[0]

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode()

    async def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in await self._sbx.client.list_files(self._sbx.id, path)]


class AsyncSandbox(AsyncSandboxWorkspace, _AsyncLifecycle):
    """The asynchronous twin of :class:`Sandbox`."""

    def __init__(self, info: wire.SandboxRecord, client: AsyncClient) -> None:
        self.info = info
        self.client = client
        self.files = AsyncFiles(self)
        self.runs = AsyncRuns(self)
        self.policy = AsyncPolicy(self)
        self._forks = []

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
        ttl: str | float | None = None,
        idle_timeout: str | float | None = None,
        on_expire: Literal["destroy", "pause"] | None = None,
        require_approval: builtins.list[str] | None = None,
        image: str | None = None,
        unikraft_metro: str | None = None,
        settings: Settings | None = None,
    ) -> AsyncSandbox:
        client = AsyncClient(settings)
        spec = sandbox_spec(
            client.settings,
            network=network,
            allow_hosts=allow_hosts or (),
            allow_ports=allow_ports or (),
            allow_cidrs=allow_cidrs or (),
            secrets=secrets,
            image=image,
            metro=unikraft_metro,
            name=name,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            mounts=mounts or (),
            labels=labels,
            workdir=workdir,
            provider=provider,
            ttl=ttl,
            idle_timeout=idle_timeout,
            on_expire=on_expire,
            require_approval=require_approval or (),
        )
        return cls(await client.create(spec), client)

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
        return [cls(info, client) for info in await client.list(include_all, labels, state)]

    async def refresh(self) -> wire.SandboxRecord:
        self.info = await self.client.get(self.id)
        return self.info

    @property
    def network(self) -> wire.NetworkPolicy:
        """The network policy as of the last refresh: mode, allow_hosts, deny_hosts, ports, cidrs."""
        return self.info["spec"].get("network") or {"mode": "none"}

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
        approval: str | None = None,
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
        approval: str | None = None,
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
        approval: str | None = None,
    ) -> ExecResult | AsyncRun:
        """Run a command: an :class:`ExecResult`, or an :class:`AsyncRun` with ``background=True``."""
        cap = self._cap if max_output is None else max_output
        req = exec_request(
            command,
            env=env,
            cwd=cwd,
            timeout=timeout,
            stdin=stdin,
            max_output=cap,
            idle_timeout=idle_timeout,
            secrets=secrets,
            redact=redact,
            approval=approval,
        )
        if background:
            return AsyncRun(await self.client.start(self.id, req), self.client)
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
        await self.client.get(self.id)
        ws = await self.client.endpoint.ws_connect_async(_attach_path(self.id))
        await ws.send(_pty_start(command, rows, cols, env, cwd, timeout))
        return AsyncPty(ws)

    async def destroy(self, approval: str | None = None) -> wire.DestroyResult:
        return await self.client.destroy(self.id, approval)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Destroy the sandbox and the children ``fork`` made from it (unless ``keep=True``),
        then close the HTTP client."""
        try:
            await self._destroy_forks()
        finally:
            try:
                await self.destroy()
            finally:
                await self.client.close()
