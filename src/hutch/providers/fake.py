"""An in-memory provider for tests and embedding. Public and deterministic.

It emulates a small command vocabulary so that the Service's workflow can be tested
without real isolation, and so that it passes the provider contract suite
(``tests/contract``) like every other provider: ``echo ARGS``, ``true``, ``false``,
``cat`` (stdin, an interactive run's input, or files of the sandbox), ``exit N``,
``sleep SECONDS``, ``pwd``, ``printenv [NAME]``, and ``sh -c SCRIPT`` where SCRIPT is those commands separated by
``;`` or newlines, each optionally ending in ``>&2``, with ``$NAME`` / ``${NAME}``
expanded from the run's environment (the sandbox's env and secrets, then the run's).
Anything else exits 127 like a missing program. Output is streamed and kept as it is
written, so a background run can be polled and killed; both timeouts are enforced.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import re
import shlex
import socket
import stat
import tarfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import InvalidError, NotFoundError, PermissionDeniedError, UnavailableError
from hutch.models import FileEntry, RawOutput, SandboxRecord, SandboxSpec
from hutch.provider import Capabilities, CheckResult, CopyReport, Death, ExecSpec, OnGone, Usage, tenant_storage

SHELLS = {"sh", "bash", "dash"}
VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


class Job:
    """One run of the fake: its output so far, and the task that runs it."""

    def __init__(self, sandbox_id: str, argv: list[str]) -> None:
        self.sandbox_id = sandbox_id
        self.argv = argv
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.last_output = time.monotonic()
        self.task: asyncio.Future[tuple[int, str | None]] | None = None
        self.reason: str | None = None
        self.signal = 0


class Shell:
    """The emulated commands of one run."""

    def __init__(
        self,
        files: dict[str, bytes],
        env: dict[str, str],
        cwd: str,
        stdin: bytes | None,
        emit: Callable[[str, bytes], Awaitable[None]],
        inbox: asyncio.Queue[dict[str, Any]] | None = None,
    ) -> None:
        self.files, self.env, self.cwd, self.stdin, self.emit = files, env, cwd, stdin, emit
        self.inbox = inbox  # an interactive run's input, as the client sends it

    async def run(self, argv: list[str]) -> tuple[int, str | None]:
        """(exit code, spawn error) of ``argv``."""
        prog = argv[0].rsplit("/", 1)[-1]
        if prog in SHELLS and len(argv) >= 3 and argv[1] == "-c":
            return await self.script(argv[2]), None
        code = await self.command(argv, "stdout")
        if code is None:
            await self.emit("stderr", f"{prog}: command not found\n".encode())
            return 127, f"{prog}: not found"
        return code, None

    async def script(self, text: str) -> int:
        code = 0
        for line in re.split(r"[;\n]", text):
            try:
                words = [VAR.sub(lambda m: self.env.get(m.group(1) or m.group(2), ""), w) for w in shlex.split(line)]
            except ValueError as exc:  # an unterminated quote
                await self.emit("stderr", f"sh: 1: Syntax error: {exc}\n".encode())
                return 2
            stream = "stdout"
            if words[-2:] == [">", "&2"] or words[-1:] == [">&2"]:
                words, stream = words[: -2 if words[-1] == "&2" else -1], "stderr"
            if not words:
                continue
            if words[0] == "exit":
                return int(words[1]) if len(words) > 1 else code
            result = await self.command(words, stream)
            if result is None:
                await self.emit("stderr", f"sh: 1: {words[0]}: not found\n".encode())
                result = 127
            code = result
        return code

    async def command(self, argv: list[str], stream: str) -> int | None:
        """One emulated command's exit code; None when it is not one of them."""
        prog, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        if prog == "echo":
            await self.emit(stream, (" ".join(args) + "\n").encode())
        elif prog in ("true", "false"):
            return int(prog == "false")
        elif prog == "exit":
            return int(args[0]) if args else 0
        elif prog == "pwd":
            await self.emit(stream, (self.cwd + "\n").encode())
        elif prog == "printenv":
            if args:
                if args[0] not in self.env:
                    return 1
                await self.emit(stream, (self.env[args[0]] + "\n").encode())
            else:
                await self.emit(stream, "".join(f"{k}={v}\n" for k, v in sorted(self.env.items())).encode())
        elif prog == "sleep":
            await asyncio.sleep(float(args[0]) if args else 0.0)
        elif prog == "cat":
            return await self.cat(args, stream)
        else:
            return None
        return 0

    async def cat(self, args: list[str], stream: str) -> int:
        if not args:
            await self.emit(stream, self.stdin or b"")
            while self.inbox is not None:  # live input until the client's end of file (or hangup)
                msg = await self.inbox.get()
                if "stdin" in msg:
                    await self.emit(stream, msg["stdin"])
                elif "eof" in msg or "hangup" in msg:
                    self.inbox = None
            return 0
        code = 0
        for name in args:
            path = posixpath.normpath(posixpath.join(self.cwd, name))
            if path in self.files:
                await self.emit(stream, self.files[path])
            else:
                await self.emit("stderr", f"cat: {name}: No such file or directory\n".encode())
                code = 1
        return code


class FakeProvider:
    name = "fake"
    capabilities = Capabilities(
        mounts=False,
        limits=frozenset({"memory", "pids", "cpus"}),
        secrets=True,
        workspace=True,
        pause=True,
        shared_workspace=True,
        interactive=True,
        watch=True,
        changes=True,
        usage=True,
        pool=True,
        ports=True,
    )

    def __init__(self, settings: Settings | None = None) -> None:
        self.sandboxes: dict[str, dict[str, bytes]] = {}
        self.calls: list[tuple[str, str]] = []
        self.secrets: dict[str, dict[str, str]] = {}  # in memory only, like a real provider's agent
        self.env: dict[str, dict[str, str]] = {}
        self.jobs: dict[str, Job] = {}
        self.started: dict[str, set[str]] = {}  # the files each sandbox had at create
        self.ctimes: dict[str, float] = {}  # "ID:PATH" -> when hutch last wrote it
        self.status: dict[str, RawOutput] = {}
        self.transcript: list[tuple[str, str, str, bytes]] = []
        self.tenants: dict[str, dict[str, bytes]] = {}
        self.modes: dict[str, int] = {}  # "sandbox id:path" -> mode of a file written, pushed or forked
        self.paused: set[str] = set()
        self.readonly: set[str] = set()  # sub-agents with a read-only view of the parent's files
        self.watched: dict[str, OnGone] = {}
        self.free_memory: int | None = 64 << 30  # what memory_available reports (tests change it)

    async def check(self) -> list[CheckResult]:
        return [CheckResult("fake", True, "in-memory provider")]

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        self.calls.append(("create", rec.id))
        storage = tenant_storage(rec)
        self.sandboxes[rec.id] = self.tenants.setdefault(storage, {}) if storage else {}
        self.started[rec.id] = set(self.sandboxes[rec.id])
        self.secrets[rec.id] = dict(rec.spec.secrets)
        self.env[rec.id] = dict(rec.spec.env)  # the store keeps only the keys: held from create, like an agent
        parent = rec.data.get("parent")
        if parent:  # a sub-agent shares its parent's files (the fake's whole tree stands for /workspace)
            self.sandboxes[rec.id] = self.sandboxes.setdefault(parent, {})
        if parent and rec.data.get("workspace_readonly"):
            self.readonly.add(rec.id)
        return dict(rec.data), {k: "fake" for k in ("memory", "pids", "cpus")}

    async def alive(self, rec: SandboxRecord) -> bool:
        return rec.id in self.sandboxes

    # -- a warm pool (PoolProvider) --------------------------------------------------------

    def pool_refusal(self, spec: SandboxSpec) -> str | None:
        return None

    async def adopt_member(self, rec: SandboxRecord, member: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        self.calls.append(("adopt_member", rec.id))
        if rec.id not in self.sandboxes:
            raise UnavailableError(f"fake sandbox {rec.id} is gone")
        self.secrets[rec.id] = dict(rec.spec.secrets)
        self.env[rec.id] = dict(rec.spec.env)
        return {k: v for k, v in member.data.items() if k != "pool_member"}, dict(member.enforcement)

    def hurry_member(self, member_id: str) -> None:
        self.calls.append(("hurry", member_id))

    async def member_memory(self, rec: SandboxRecord) -> int | None:
        return 1 << 20 if rec.id in self.sandboxes else None

    def memory_available(self) -> int | None:
        return self.free_memory

    def watch(self, rec: SandboxRecord, on_gone: OnGone) -> bool:
        self.watched[rec.id] = on_gone
        return True

    async def die(self, sandbox_id: str, death: Death) -> None:
        """Test hook: the sandbox dies on its own, and its watcher says so."""
        self.sandboxes.pop(sandbox_id, None)
        for job in self.jobs.values():  # its runs die with it
            if job.sandbox_id == sandbox_id and job.task is not None:
                job.task.cancel()
        on_gone = self.watched.pop(sandbox_id, None)
        if on_gone is not None:
            await on_gone(sandbox_id, death)

    def _files(self, rec: SandboxRecord) -> dict[str, bytes]:
        if rec.id not in self.sandboxes:
            raise NotFoundError(f"fake sandbox {rec.id} is gone")
        return self.sandboxes[rec.id]

    def usage(self, rec: SandboxRecord) -> Usage:
        """Made up, but from the sandbox: its files' bytes as memory, one process per run in progress."""
        files = self.sandboxes.get(rec.id)
        if files is None:
            return {}
        jobs = sum(1 for job in self.jobs.values() if job.sandbox_id == rec.id and job.task is not None and not job.task.done())
        return {"memory": sum(len(v) for v in files.values()), "cpu_seconds": 0.0, "pids": 1 + jobs}

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        files = self._files(rec)
        self.calls.append(("exec", rec.id))
        run_id, on_output = spec.run_id, spec.on_output
        job = self.jobs[run_id] = Job(rec.id, spec.argv)
        hidden = {} if spec.redact is None else self.secrets.get(rec.id, {}) | spec.redact
        marks = [(v.encode(), f"[redacted:{k}]".encode()) for k, v in hidden.items() if len(v) >= 4]

        async def emit(name: str, data: bytes) -> None:
            for value, mark in marks:
                data = data.replace(value, mark)
            if data:
                job.out[name] += data
                job.last_output = time.monotonic()
                self.transcript.append((rec.id, run_id, name, data))
                if on_output is not None:
                    await on_output(name, data)

        inbox = spec.interactive.inbox if spec.interactive is not None else None
        env = self.env.get(rec.id, {}) | self.secrets.get(rec.id, {}) | spec.env
        shell = Shell(files, env, spec.cwd, spec.stdin, emit, inbox)
        job.task = asyncio.ensure_future(shell.run(spec.argv))
        if spec.on_start is not None:  # the run exists on its own now
            spec.on_start()
        try:
            await self._supervise(job, spec.timeout, spec.idle_timeout)
        finally:
            job.task.cancel()  # a no-op once it ended; the run goes when its caller goes
        out, err = bytes(job.out["stdout"]), bytes(job.out["stderr"])
        if job.task.cancelled():  # a timeout, or killed
            sig = 9 if job.reason != "killed" else job.signal
            raw = RawOutput(exit_code=128 + sig, signal=sig, timed_out=job.reason != "killed", killed=job.reason == "killed")
            raw = raw.model_copy(update={"reason": job.reason})
        else:
            code, spawn_error = job.task.result()
            raw = RawOutput(exit_code=code, spawn_error=spawn_error)
        raw = raw.model_copy(update={"stdout_bytes": len(out), "stderr_bytes": len(err), "finished_at": time.time()})
        self.status[run_id] = raw
        return raw.model_copy(update={"stdout": out[: spec.max_output], "stderr": err[: spec.max_output]})

    @staticmethod
    async def _supervise(job: Job, timeout: float | None, idle_timeout: float | None) -> None:
        """Until the run ends, is killed, or one of its timeouts passes."""
        assert job.task is not None
        started = time.monotonic()
        while not job.task.done():
            deadlines = [(started + timeout, "timeout")] if timeout is not None else []
            if idle_timeout is not None:
                deadlines.append((job.last_output + idle_timeout, "idle_timeout"))
            when, reason = min(deadlines) if deadlines else (None, None)
            left = None if when is None else when - time.monotonic()
            if left is not None and left <= 0:
                job.reason = reason
                job.task.cancel()
                break
            await asyncio.wait({job.task}, timeout=left)
        with contextlib.suppress(asyncio.CancelledError):
            await job.task

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        return self.status.get(run_id)

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        return {r for r, job in self.jobs.items() if job.sandbox_id == rec.id and r not in self.status}

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        job = self.jobs.get(run_id)
        if job is None or job.task is None or job.task.done():
            return False
        job.reason, job.signal = "killed", sig
        job.task.cancel()
        return True

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        job = self.jobs.get(run_id)
        data = bytes(job.out[stream]) if job is not None else b""
        return data[offset : offset + limit], len(data)

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        mine = [t for t in self.transcript if t[0] == rec.id]
        records = [{"offset": i, "run_id": r, "stream": s, "data": d} for i, (_, r, s, d) in enumerate(mine) if i >= offset]
        return records[: max(1, limit)], offset + len(records[: max(1, limit)]), len(mine)

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        self._files(rec)
        procs = [{"pid": 1, "ppid": 0, "user": "sandbox", "state": "S", "cpu_seconds": 0.0, "rss": 0, "command": "fake"}]
        for pid, run_id in enumerate(sorted(await self.runs_alive(rec)), start=2):
            command = shlex.join(self.jobs[run_id].argv)
            procs.append(
                {"pid": pid, "ppid": 1, "user": "sandbox", "state": "S", "cpu_seconds": 0.0, "rss": 0, "command": command}
            )
        return procs

    async def destroy(self, rec: SandboxRecord) -> bool:
        self.calls.append(("destroy", rec.id))
        for job in self.jobs.values():
            if job.sandbox_id == rec.id and job.task is not None:
                job.task.cancel()
        self.watched.pop(rec.id, None)
        return self.sandboxes.pop(rec.id, None) is not None

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]:
        files = self._files(rec)
        if path not in files:
            raise NotFoundError(f"{path}: no such file")
        return files[path][:limit], len(files[path]) > limit

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None:
        if path.endswith("/"):
            raise InvalidError(f"{path}: is a directory")
        if rec.id in self.readonly:
            raise PermissionDeniedError(f"{path}: read-only file system")
        self._files(rec)[path] = data
        self.ctimes[f"{rec.id}:{path}"] = time.time()
        self.modes[f"{rec.id}:{path}"] = mode

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]:
        prefix = path.rstrip("/") + "/"
        names = sorted({p[len(prefix) :].split("/")[0] for p in self._files(rec) if p.startswith(prefix)})
        now = time.time()
        return [
            FileEntry(
                name=n,
                type="file" if prefix + n in self._files(rec) else "dir",
                size=len(self._files(rec).get(prefix + n, b"")),
                mode=stat.S_IMODE(self.modes.get(f"{rec.id}:{prefix + n}", 0o644 if prefix + n in self._files(rec) else 0o755)),
                mtime=now,
            )
            for n in names
        ]

    # -- changes capability: the files written through hutch since create ------------------

    async def changes(self, rec: SandboxRecord, since: float | None, under: str) -> dict[str, Any]:
        files, began = self._files(rec), self.started.get(rec.id, set())
        found: list[dict[str, Any]] = []
        for path in sorted(set(files) | began):
            when = self.ctimes.get(f"{rec.id}:{path}")
            if not (path == under or path.startswith(under.rstrip("/") + "/")):
                continue
            if path not in files:
                found.append({"path": path, "kind": "deleted", "type": "other", "size": 0, "mode": 0, "ctime": None})
            elif when is not None and (since is None or when >= since):
                kind = "modified" if path in began else "added"
                found.append({"path": path, "kind": kind, "type": "file", "size": len(files[path]), "mode": 0o644, "ctime": when})
        return {"since": since, "changes": found, "truncated": False, "notes": ["the fake sees only files written through hutch"]}

    async def export_changes(self, rec: SandboxRecord, dest: Path) -> dict[str, Any]:
        raise InvalidError("the fake provider has no writable root to commit", hint="use the local provider with --image")

    # -- ports capability: a port is exposed like any other; nothing listens in a fake sandbox ----

    async def connect_port(self, rec: SandboxRecord, port: int) -> socket.socket:
        raise UnavailableError(
            f"nothing listens on port {port} of sandbox {rec.id} (the fake provider runs no servers)",
            hint="use the local provider to reach a server inside a sandbox",
        )

    # -- workspace capability: real tars of the in-memory files -------------------------

    def _ws(self, rec: SandboxRecord) -> str:
        return rec.spec.workdir.rstrip("/") + "/"

    async def export_workspace(self, rec: SandboxRecord, dest: Path) -> int:
        files, prefix = self._files(rec), self._ws(rec)
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for p in files if p.startswith(prefix)):
                info = tarfile.TarInfo("./" + path[len(prefix) :])
                info.size = len(files[path])
                info.mode = self.modes.get(f"{rec.id}:{path}", 0o644)
                tar.addfile(info, io.BytesIO(files[path]))
        return dest.stat().st_size

    async def import_workspace(self, rec: SandboxRecord, src: Path | None, delete: list[str]) -> None:
        files, prefix = self._files(rec), self._ws(rec)
        with tarfile.open(src) if src else contextlib.nullcontext() as tar:
            for member in tar if tar is not None else ():
                name = posixpath.normpath(member.name)
                if name.startswith(("/", "..")):
                    raise InvalidError(f"{member.name}: outside the workspace")
                if member.isfile() and tar is not None:
                    data = tar.extractfile(member)
                    files[prefix + name] = data.read() if data else b""
                    self.modes[f"{rec.id}:{prefix + name}"] = member.mode
        for rel in delete:
            files.pop(prefix + rel, None)

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> CopyReport:
        source, target = self._files(src), self._files(dst)
        target.update(source)
        prefix = f"{src.id}:"
        self.modes |= {f"{dst.id}:{key[len(prefix) :]}": mode for key, mode in self.modes.items() if key.startswith(prefix)}
        return CopyReport("memory")

    async def export_root(self, rec: SandboxRecord, dest: Path) -> int | None:
        return None  # its sandboxes have no writable root of their own

    async def delete_tenant(self, name: str) -> bool:
        return self.tenants.pop(name, None) is not None

    async def pause(self, rec: SandboxRecord) -> str:
        self._files(rec)
        self.calls.append(("pause", rec.id))
        self.paused.add(rec.id)
        return "fake"

    async def resume(self, rec: SandboxRecord) -> None:
        self.calls.append(("resume", rec.id))
        self.paused.discard(rec.id)

    async def close(self) -> None:
        return None
