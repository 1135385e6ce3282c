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
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from hutch.client import AsyncClient, Client
from hutch.config import Settings
from hutch.errors import HutchError, InvalidError


@dataclass(frozen=True)
class ExecResult:
    run_id: str
    sandbox_id: str
    exit_code: int
    status: str
    stdout: str
    stderr: str
    stdout_raw: bytes = field(repr=False)
    stderr_raw: bytes = field(repr=False)
    truncated: bool
    duration_ms: float
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    signal: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.status == "completed"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExecResult:
        def stream(name: str) -> tuple[str, bytes]:
            if d.get(f"{name}_base64"):
                raw = base64.b64decode(d[name])
                return raw.decode("utf-8", errors="replace"), raw
            return d[name], d[name].encode()

        out, out_raw = stream("stdout")
        err, err_raw = stream("stderr")
        return cls(
            run_id=d["run_id"],
            sandbox_id=d["sandbox_id"],
            exit_code=d["exit_code"],
            status=d["status"],
            stdout=out,
            stderr=err,
            stdout_raw=out_raw,
            stderr_raw=err_raw,
            truncated=d["truncated"],
            duration_ms=d["duration_ms"],
            stdout_bytes=d.get("stdout_bytes", 0),
            stderr_bytes=d.get("stderr_bytes", 0),
            signal=d.get("signal"),
            error=d.get("error"),
        )


@dataclass(frozen=True)
class FileInfo:
    name: str
    type: str
    size: int
    mode: int
    mtime: float


def _spec(**kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        k: v for k, v in kw.items() if k in ("name", "env", "labels", "workdir", "provider") and v is not None
    }
    limits = {k: kw[k] for k in ("memory", "pids", "cpus") if kw.get(k) is not None}
    if limits:
        spec["limits"] = limits
    if kw.get("mounts"):
        spec["mounts"] = [_mount(m) for m in kw["mounts"]]
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
) -> dict[str, Any]:
    req: dict[str, Any] = {"command": command, "env": env or {}, "cwd": cwd, "timeout": timeout}
    req |= {"idle_timeout": idle_timeout, "background": background}
    if stdin is not None:
        raw = stdin.encode() if isinstance(stdin, str) else stdin
        req |= {"stdin": base64.b64encode(raw).decode(), "stdin_base64": True}
    if max_output is not None:
        req["max_output"] = max_output
    return req


def _matches(info: dict[str, Any], labels: dict[str, str] | None, state: str | None) -> bool:
    have = info.get("spec", {}).get("labels", {})
    return (state is None or info.get("state") == state) and all(have.get(k) == v for k, v in (labels or {}).items())


def _data(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a run's output, with where it starts in its stream."""

    stream: str
    data: bytes
    offset: int

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _chunks(res: dict[str, Any]) -> list[OutputChunk]:
    out = []
    for name in ("stdout", "stderr"):
        part = res[name]
        if part["data"]:
            data = base64.b64decode(part["data"]) if part["base64"] else part["data"].encode()
            out.append(OutputChunk(name, data, part["offset"]))
    return out


def _result_of(run: dict[str, Any], stdout: bytes, stderr: bytes, cap: int) -> ExecResult:
    return ExecResult(
        run_id=run["id"],
        sandbox_id=run["sandbox_id"],
        exit_code=125 if run["exit_code"] is None else run["exit_code"],
        status=run["status"],
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr.decode("utf-8", errors="replace"),
        stdout_raw=stdout,
        stderr_raw=stderr,
        truncated=bool(run["truncated"]) or run["stdout_bytes"] > cap or run["stderr_bytes"] > cap,
        duration_ms=run["duration_ms"] or 0.0,
        stdout_bytes=run["stdout_bytes"],
        stderr_bytes=run["stderr_bytes"],
        signal=run.get("signal"),
        error=run.get("error"),
    )


class Run:
    """A run started with ``background=True`` (or found with ``sbx.runs``)."""

    def __init__(self, info: dict[str, Any], client: Client) -> None:
        self.info = info
        self.client = client

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def status(self) -> str:
        return str(self.info["status"])

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, status={self.status!r})"

    def refresh(self) -> dict[str, Any]:
        self.info = self.client.run(self.id)
        return self.info

    def wait(self, timeout: float | None = None, max_output: int = 1 << 20) -> ExecResult:
        """Block until the run ends (TimeoutError_ kind ``timeout`` after ``timeout`` s)."""
        self.info = self.client.wait(self.id, timeout)
        res = self.client.output(self.id, 0, 0, min(max_output, 16 << 20))
        return _result_of(self.info, *_raw_pair(res), cap=max_output)

    def kill(self, signal: str | int = "TERM") -> dict[str, Any]:
        return self.client.kill(self.id, signal)

    def stream(self, interval: float = 0.2) -> Iterator[OutputChunk]:
        """Output as it is written, until the run ends; resumable by offset."""
        offsets = {"stdout": 0, "stderr": 0}
        while True:
            res = self.client.output(self.id, offsets["stdout"], offsets["stderr"])
            yield from _chunks(res)
            for name in offsets:
                offsets[name] = res[name]["next_offset"]
            self.info = res["run"]
            if res["done"]:
                return
            if not any(res[n]["next_offset"] < res[n]["size"] for n in offsets):
                time.sleep(interval)


def _raw_pair(res: dict[str, Any]) -> tuple[bytes, bytes]:
    pair = []
    for name in ("stdout", "stderr"):
        part = res[name]
        pair.append(base64.b64decode(part["data"]) if part["base64"] else part["data"].encode())
    return pair[0], pair[1]


class Runs:
    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def list(self, status: str | None = None) -> builtins.list[Run]:
        return [Run(r, self._sbx.client) for r in self._sbx.client.runs(self._sbx.id, status)]

    def get(self, run_id: str) -> Run:
        return Run(self._sbx.client.run(run_id), self._sbx.client)


class AsyncRun:
    """The asynchronous twin of :class:`Run`."""

    def __init__(self, info: dict[str, Any], client: AsyncClient) -> None:
        self.info = info
        self.client = client

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def status(self) -> str:
        return str(self.info["status"])

    def __repr__(self) -> str:
        return f"AsyncRun(id={self.id!r}, status={self.status!r})"

    async def refresh(self) -> dict[str, Any]:
        self.info = await self.client.run(self.id)
        return self.info

    async def wait(self, timeout: float | None = None, max_output: int = 1 << 20) -> ExecResult:
        self.info = await self.client.wait(self.id, timeout)
        res = await self.client.output(self.id, 0, 0, min(max_output, 16 << 20))
        return _result_of(self.info, *_raw_pair(res), cap=max_output)

    async def kill(self, signal: str | int = "TERM") -> dict[str, Any]:
        return await self.client.kill(self.id, signal)

    async def stream(self, interval: float = 0.2) -> AsyncIterator[OutputChunk]:
        offsets = {"stdout": 0, "stderr": 0}
        while True:
            res = await self.client.output(self.id, offsets["stdout"], offsets["stderr"])
            for chunk in _chunks(res):
                yield chunk
            for name in offsets:
                offsets[name] = res[name]["next_offset"]
            self.info = res["run"]
            if res["done"]:
                return
            if not any(res[n]["next_offset"] < res[n]["size"] for n in offsets):
                import asyncio  # here, not at the top: the CLI imports this module and asyncio costs ~30 ms

                await asyncio.sleep(interval)


class AsyncRuns:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def list(self, status: str | None = None) -> builtins.list[AsyncRun]:
        return [AsyncRun(r, self._sbx.client) for r in await self._sbx.client.runs(self._sbx.id, status)]

    async def get(self, run_id: str) -> AsyncRun:
        return AsyncRun(await self._sbx.client.run(run_id), self._sbx.client)


class Pty:
    """An interactive terminal session in a sandbox (``sbx.pty(...)``); use it as a context manager.

    ``send`` types input, ``resize`` changes the window, ``read`` returns output as it comes
    (``b""`` once the session ended), ``wait`` returns the exit code.
    """

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.run_id: str | None = None
        self.exit_code: int | None = None

    def send(self, data: bytes | str) -> None:
        self._ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(_data(data)).decode()}))

    def resize(self, rows: int, cols: int) -> None:
        self._ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    def read(self, timeout: float | None = None) -> bytes:
        while self.exit_code is None:
            event = json.loads(self._ws.recv(timeout=timeout))
            kind = event.get("type")
            if kind == "run":
                self.run_id = event["run_id"]
            elif kind in ("stdout", "stderr"):
                return base64.b64decode(event["data"]) if event["base64"] else event["data"].encode()
            elif kind == "exit":
                self.exit_code = int(event["exit_code"])
            elif kind == "error":
                raise HutchError.from_dict(event)
        return b""

    def wait(self, timeout: float | None = None) -> int:
        while self.read(timeout):
            pass
        assert self.exit_code is not None
        return self.exit_code

    def close(self) -> None:
        """Leave the session (the run is hung up if it is still going)."""
        self._ws.close()

    def __enter__(self) -> Pty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncPty:
    """The asynchronous twin of :class:`Pty`."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.run_id: str | None = None
        self.exit_code: int | None = None

    async def send(self, data: bytes | str) -> None:
        await self._ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(_data(data)).decode()}))

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def read(self, timeout: float | None = None) -> bytes:
        while self.exit_code is None:
            import asyncio

            event = json.loads(await asyncio.wait_for(self._ws.recv(), timeout))
            kind = event.get("type")
            if kind == "run":
                self.run_id = event["run_id"]
            elif kind in ("stdout", "stderr"):
                return base64.b64decode(event["data"]) if event["base64"] else event["data"].encode()
            elif kind == "exit":
                self.exit_code = int(event["exit_code"])
            elif kind == "error":
                raise HutchError.from_dict(event)
        return b""

    async def wait(self, timeout: float | None = None) -> int:
        while await self.read(timeout):
            pass
        assert self.exit_code is not None
        return self.exit_code

    async def close(self) -> None:
        await self._ws.close()

    async def __aenter__(self) -> AsyncPty:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _pty_start(
    command: str | list[str] | None, rows: int, cols: int, env: dict[str, str] | None, cwd: str | None, timeout: float | None
) -> str:
    argv = command or ["/bin/sh", "-c", "command -v bash >/dev/null && exec bash -l || exec sh -l"]
    start = {"type": "start", "command": argv, "tty": True, "rows": rows, "cols": cols, "cwd": cwd, "timeout": timeout}
    return json.dumps(start | {"env": {"TERM": "xterm"} | (env or {})})


def _attach_uri(sandbox_id: str) -> str:
    return f"ws://hutch/v1/sandboxes/{sandbox_id}/attach"


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


class Sandbox:
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
        settings: Settings | None = None,
    ) -> Sandbox:
        client = Client(settings)
        spec = _spec(
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
        background: bool = False,
    ) -> ExecResult | Run:
        """Run a command. Returns an :class:`ExecResult`, or a :class:`Run` with ``background=True``.

        A non-zero exit never raises: read ``exit_code`` and ``status``.
        """
        cap = self._cap if max_output is None else max_output
        req = _exec_req(command, env, cwd, timeout, stdin, cap, idle_timeout, background)
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


class AsyncSandbox:
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
        settings: Settings | None = None,
    ) -> AsyncSandbox:
        client = AsyncClient(settings)
        spec = _spec(
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
        background: bool = False,
    ) -> ExecResult | AsyncRun:
        """Run a command: an :class:`ExecResult`, or an :class:`AsyncRun` with ``background=True``."""
        cap = self._cap if max_output is None else max_output
        req = _exec_req(command, env, cwd, timeout, stdin, cap, idle_timeout, background)
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
