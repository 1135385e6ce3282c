"""An in-memory provider for tests and embedding. Public and deterministic.

It understands a handful of commands so that the Service's workflow can be tested
without real isolation: ``echo ARGS``, ``true``, ``false``, ``cat`` (stdin),
``exit N``, ``sleep SECONDS``, ``printf``-free ``sh -c 'echo ...'`` is *not* emulated.
Anything else exits 127 like a missing program.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import stat
import tarfile
import time
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import InvalidError, NotFoundError, PermissionDeniedError
from hutch.models import FileEntry, RawOutput, SandboxRecord
from hutch.provider import Capabilities, CheckResult, Interactive, OnOutput


class FakeProvider:
    name = "fake"
    capabilities = Capabilities(
        mounts=False,
        limits=frozenset({"memory", "pids", "cpus"}),
        files=True,
        secrets=True,
        workspace=True,
        pause=True,
        shared_workspace=True,
    )

    def __init__(self, settings: Settings | None = None) -> None:
        self.sandboxes: dict[str, dict[str, bytes]] = {}
        self.calls: list[tuple[str, str]] = []
        self.secrets: dict[str, dict[str, str]] = {}  # in memory only, like a real provider's agent
        self.outputs: dict[str, dict[str, bytes]] = {}
        self.status: dict[str, RawOutput] = {}
        self.transcript: list[tuple[str, str, str, bytes]] = []
        self.tenants: dict[str, dict[str, bytes]] = {}
        self.modes: dict[str, int] = {}  # "sandbox id:path" -> mode of files written by a tar
        self.paused: set[str] = set()
        self.readonly: set[str] = set()  # sub-agents with a read-only view of the parent's files

    async def check(self) -> list[CheckResult]:
        return [CheckResult("fake", True, "in-memory provider")]

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        self.calls.append(("create", rec.id))
        self.sandboxes[rec.id] = self.tenants.setdefault(rec.spec.tenant, {}) if rec.spec.tenant else {}
        self.secrets[rec.id] = dict(rec.spec.secrets)
        parent = rec.data.get("parent")
        if parent:  # a sub-agent shares its parent's files (the fake's whole tree stands for /workspace)
            self.sandboxes[rec.id] = self.sandboxes.setdefault(parent, {})
        if parent and rec.data.get("workspace_readonly"):
            self.readonly.add(rec.id)
        return dict(rec.data), {k: "fake" for k in ("memory", "pids", "cpus")}

    async def alive(self, rec: SandboxRecord) -> bool:
        return rec.id in self.sandboxes

    def _files(self, rec: SandboxRecord) -> dict[str, bytes]:
        if rec.id not in self.sandboxes:
            raise NotFoundError(f"fake sandbox {rec.id} is gone")
        return self.sandboxes[rec.id]

    async def exec(
        self,
        rec: SandboxRecord,
        run_id: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stdin: bytes | None,
        timeout: float | None,
        idle_timeout: float | None,
        max_output: int,
        stream: bool = True,
        on_output: OnOutput | None = None,
        interactive: Interactive | None = None,
        redact: dict[str, str] | None = None,
    ) -> RawOutput:
        self._files(rec)
        self.calls.append(("exec", rec.id))
        raw = await self._run(argv, stdin, timeout, idle_timeout)
        if redact is not None:
            out, err = raw.stdout, raw.stderr
            for name, value in (self.secrets.get(rec.id, {}) | redact).items():
                if len(value) >= 4:
                    mark = f"[redacted:{name}]".encode()
                    out, err = out.replace(value.encode(), mark), err.replace(value.encode(), mark)
            raw = raw.model_copy(update={"stdout": out, "stderr": err})
        self.outputs[run_id] = {"stdout": raw.stdout, "stderr": raw.stderr}
        self.status[run_id] = raw
        for name in ("stdout", "stderr"):
            data = self.outputs[run_id][name]
            if data:
                self.transcript.append((rec.id, run_id, name, data))
                if on_output is not None:
                    await on_output(name, data)
        return raw.model_copy(update={"stdout": raw.stdout[:max_output], "stderr": raw.stderr[:max_output]})

    async def _run(self, argv: list[str], stdin: bytes | None, timeout: float | None, idle: float | None) -> RawOutput:
        prog, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        out, code = b"", 0
        if prog == "echo":
            out = (" ".join(args) + "\n").encode()
        elif prog == "true":
            code = 0
        elif prog == "false":
            code = 1
        elif prog == "cat":
            out = stdin or b""
        elif prog == "exit":
            code = int(args[0]) if args else 0
        elif prog == "sleep":
            seconds = float(args[0]) if args else 0.0
            limit = min(t for t in (timeout, idle, seconds + 1) if t is not None)
            if seconds > limit:
                await asyncio.sleep(limit)
                reason = "timeout" if timeout is not None and limit == timeout else "idle_timeout"
                return RawOutput(exit_code=137, signal=9, timed_out=True, reason=reason)
            await asyncio.sleep(seconds)
        else:
            msg = f"{prog}: command not found\n".encode()
            return RawOutput(exit_code=127, stderr=msg, stderr_bytes=len(msg), spawn_error=f"{prog}: not found")
        return RawOutput(exit_code=code, stdout=out, stdout_bytes=len(out))

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        return self.status.get(run_id)

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        return set()

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        return False

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        data = self.outputs.get(run_id, {}).get(stream, b"")
        return data[offset : offset + limit], len(data)

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        mine = [t for t in self.transcript if t[0] == rec.id]
        records = [{"offset": i, "run_id": r, "stream": s, "data": d} for i, (_, r, s, d) in enumerate(mine) if i >= offset]
        return records[: max(1, limit)], offset + len(records[: max(1, limit)]), len(mine)

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        self._files(rec)
        return [{"pid": 1, "ppid": 0, "user": "sandbox", "state": "S", "cpu_seconds": 0.0, "rss": 0, "command": "fake"}]

    async def destroy(self, rec: SandboxRecord) -> bool:
        self.calls.append(("destroy", rec.id))
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

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]:
        prefix = path.rstrip("/") + "/"
        names = sorted({p[len(prefix) :].split("/")[0] for p in self._files(rec) if p.startswith(prefix)})
        now = time.time()
        return [
            FileEntry(
                name=n,
                type="file" if prefix + n in self._files(rec) else "dir",
                size=len(self._files(rec).get(prefix + n, b"")),
                mode=stat.S_IMODE(0o644),
                mtime=now,
            )
            for n in names
        ]

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

    async def clone_workspace(self, src: SandboxRecord, dst: SandboxRecord) -> str:
        source, target = self._files(src), self._files(dst)
        target.update(source)
        return "memory"

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
