"""``AsyncSandbox``: the asynchronous twin of :class:`~hutch.sdk.sync.Sandbox`, kept in step
by tests/unit/test_sdk_parity.py."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Self, Unpack, overload

from hutch.client import AsyncClient
from hutch.client.oneshot import Outcome
from hutch.config import Settings
from hutch.errors import HutchError
from hutch.sdk import forks, oneshot
from hutch.sdk.files import AsyncFiles
from hutch.sdk.policy import AsyncPolicy
from hutch.sdk.pty import AsyncPty, _attach_path, _pty_start
from hutch.sdk.results import ExecResult
from hutch.sdk.runs import AsyncRun, AsyncRuns
from hutch.units import parse_time
from hutch.wire.build import ExecOptions, approval_request, exec_request, subagent_request

if TYPE_CHECKING:
    from hutch import wire


class AsyncSandbox:
    """The asynchronous twin of :class:`~hutch.sdk.sync.Sandbox`."""

    _forks: builtins.list[AsyncSandbox]  # children made by fork(), destroyed when an ``async with`` block on this sandbox ends

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
    async def create(cls, *, settings: Settings | None = None, **options: Unpack[oneshot.CreateOptions]) -> AsyncSandbox:
        """A new sandbox. ``options``: name, memory, pids, cpus, env, mounts, labels, workdir,
        provider, network, allow_hosts, allow_ports, allow_cidrs, secrets, secret_hosts, secret_body,
        no_intercept, ttl, idle_timeout, on_expire, require_approval, image, runtime, unikraft_metro, placement, node,
        tenant, setup, git_repo, git_depth, git_secret, manifest (:class:`hutch.sdk.oneshot.CreateOptions`). ``manifest`` is a
        TOML file (docs/manifest.md) the other options win over; ``git_repo`` (``URL[#REF]``) makes /workspace a
        clone of it.
        With ``tenant`` the sandbox is one of a persistent line: its /workspace outlives destroy and is
        the next ``create(tenant=...)``'s (until ``hutch tenant delete``)."""
        client = AsyncClient(settings)
        spec = oneshot.create_spec(client.settings, options)
        return cls(await client.create(spec), client)

    @classmethod
    async def run_once(
        cls,
        command: str | builtins.list[str],
        *,
        sync: str | None = None,
        pull: bool = False,
        keep: bool = False,
        sandbox: str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
        settings: Settings | None = None,
        **create: Unpack[oneshot.CreateOptions],
    ) -> ExecResult:
        """hutch run: make a sandbox (``create``: the arguments of :meth:`create`), run one
        command in the foreground, destroy the sandbox, and return the result. ``sync`` is a
        local directory pushed into /workspace first; with ``pull`` the workspace comes back into
        it afterwards. ``keep`` keeps the sandbox (``result.sandbox_id``); ``sandbox`` runs in
        that existing sandbox instead (never destroyed). A sandbox it made is destroyed however
        the run ends, also when this process is killed. A non-zero exit never raises."""
        client = AsyncClient(settings)
        try:
            cap = client.settings.output_cap if max_output is None else max_output
            req = oneshot.request(
                client.settings,
                command,
                pull=pull,
                keep=keep,
                sandbox=sandbox,
                cwd=cwd,
                timeout=timeout,
                stdin=stdin,
                max_output=cap,
                create=create,
            )
            outcome = Outcome(cap)
            answer = await client.run_once(req, sync=sync)
            try:
                async for frame in answer:
                    outcome.add(frame)
            finally:
                await answer.aclose()
            return oneshot.result(outcome)
        finally:
            await client.close()

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

    async def expose(self, port: int, *, public: bool = False) -> wire.ExposedPort:
        """Open ``port`` (a server listening inside) to the outside: ``url`` opens it as it is
        (a private URL carries a signed token; ``public``: anyone with the URL)."""
        return await self.client.expose(self.id, port, public)

    async def unexpose(self, port: int) -> wire.Unexposed:
        return await self.client.unexpose(self.id, port)

    async def ports(self) -> builtins.list[wire.ExposedPort]:
        return await self.client.ports(self.id)

    @property
    def network(self) -> wire.NetworkPolicy:
        """The network policy as of the last refresh: mode, allow_hosts, deny_hosts, ports, cidrs."""
        return self.info["spec"].get("network") or {"mode": "none"}

    @overload
    async def exec(
        self, command: str | builtins.list[str], *, background: Literal[False] = False, **options: Unpack[ExecOptions]
    ) -> ExecResult: ...

    @overload
    async def exec(
        self, command: str | builtins.list[str], *, background: Literal[True], **options: Unpack[ExecOptions]
    ) -> AsyncRun: ...

    async def exec(
        self, command: str | builtins.list[str], *, background: bool = False, **options: Unpack[ExecOptions]
    ) -> ExecResult | AsyncRun:
        """Run a command: an :class:`ExecResult`, or an :class:`AsyncRun` with ``background=True``.
        ``options``: env, cwd, timeout, idle_timeout, stdin, max_output, secrets, redact, approval, user
        (:class:`hutch.wire.build.ExecOptions`)."""
        if options.get("max_output") is None:
            options["max_output"] = self._cap
        req = exec_request(command, **options)
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

    @classmethod
    async def restore(cls, snapshot: str, *, name: str | None = None, settings: Settings | None = None) -> Self:
        """A new sandbox whose workspace is ``snapshot``."""
        client = AsyncClient(settings)
        return cls(await client.snapshot_restore(snapshot, name), client)

    # -- lifecycle ----------------------------------------------------------------------
    async def pause(self) -> wire.StateChange:
        """Freeze every process of the sandbox (``state`` becomes ``paused``)."""
        out = await self.client.pause(self.id)
        self.info = await self.client.get(self.id)
        return out

    async def resume(self) -> wire.StateChange:
        out = await self.client.resume(self.id)
        self.info = await self.client.get(self.id)
        return out

    async def keepalive(self, ttl: str | float | None = None) -> wire.Deadlines:
        """Reset the idle timer; with ``ttl`` (``"30m"``), a new deadline that long from now."""
        return await self.client.keepalive(self.id, ttl)

    async def label(self, set: dict[str, str] | None = None, remove: builtins.list[str] | None = None) -> wire.SandboxRecord:  # noqa: A002
        self.info = await self.client.label(self.id, set or {}, remove or [])
        return self.info

    async def subagent(
        self,
        *,
        name: str | None = None,
        workspace: Literal["rw", "ro"] | None = None,
        memory: str | int | None = None,
        pids: int | None = None,
        cpus: float | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        ttl: str | float | None = None,
    ) -> Self:
        """A child sandbox sharing this one's /workspace (``"ro"``: read-only) with its own processes."""
        req = subagent_request(
            self.client.settings,
            name=name,
            workspace=workspace,
            memory=memory,
            pids=pids,
            cpus=cpus,
            env=env,
            labels=labels,
            ttl=ttl,
        )
        return type(self)(await self.client.subagent(self.id, req), self.client)

    async def confirm(
        self, action: str, *, reason: str | None = None, timeout: float | None = None, wait: bool = True
    ) -> wire.ApprovalRecord:
        """Ask a human to approve ``action``; with ``wait``, block until decided or expired (read ``status``)."""
        apr = await self.client.request_approval(approval_request(action, self.id, reason, timeout))
        while wait and apr["status"] == "pending":
            apr = await self.client.wait_approval(apr["id"], 60.0)
        return apr

    # -- the workspace ------------------------------------------------------------------
    async def push(
        self,
        directory: str = ".",
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
    ) -> wire.PushSummary:
        """Send a local tree into /workspace (only what changed); returns the summary."""
        return await self.client.push(self.id, directory, delete=delete, exclude=exclude, dry_run=dry_run, force=force)

    async def pull(self, directory: str = ".", *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        """Copy /workspace into a local directory; refuses to overwrite other content unless ``force``."""
        return await self.client.pull(self.id, directory, dry_run=dry_run, force=force)

    async def diff(self, since: str | float | datetime | None = None, path: str | None = None) -> wire.ChangeList:
        """What the sandbox changed (its writable root and /workspace, or at or under ``path``),
        like ``docker diff``: ``changes`` of ``{"path", "kind", "type", "size", "mode", "ctime"}``.
        ``since`` (a Unix time, a ``datetime``, ISO 8601 text or a duration ago such as ``"10m"``)
        keeps what changed at or after it (judged by ctime, which a workload cannot set back)."""
        when = parse_time(since) if since is not None else None
        return await self.client.diff(self.id, when, path)

    async def snapshot(self, name: str) -> wire.SnapshotRecord:
        """Save the workspace as snapshot ``name``."""
        return await self.client.snapshot_save(self.id, name)

    async def fork(
        self, count: int = 1, *, name_prefix: str | None = None, keep: bool = False
    ) -> builtins.list[Self | HutchError]:
        """``count`` new sandboxes starting from a copy of this workspace; a child that
        failed is its :class:`HutchError` in the list, the others are sandboxes. In an
        ``async with`` block on this sandbox, the children are destroyed with it when the
        block ends, unless ``keep``."""
        result = await self.client.fork(self.id, count, name_prefix)
        out: builtins.list[Self | HutchError] = []
        for c in forks.children(result):
            out.append(c if isinstance(c, HutchError) else type(self)(await self.client.get(c), self.client))
        if not keep:
            self._forks.extend(c for c in out if not isinstance(c, HutchError))
        return out

    async def destroy(self, approval: str | None = None) -> wire.DestroyResult:
        return await self.client.destroy(self.id, approval)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Destroy the sandbox and the children ``fork`` made from it (unless ``keep=True``),
        then close the HTTP client."""
        try:
            await forks.destroy_all_async(self._forks)
        finally:
            try:
                await self.destroy()
            finally:
                await self.client.close()
