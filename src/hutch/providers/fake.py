"""An in-memory provider for tests and embedding. Public and deterministic.

It understands a handful of commands so that the Service's workflow can be tested
without real isolation: ``echo ARGS``, ``true``, ``false``, ``cat`` (stdin),
``exit N``, ``sleep SECONDS``, ``printf``-free ``sh -c 'echo ...'`` is *not* emulated.
Anything else exits 127 like a missing program.
"""

from __future__ import annotations

import asyncio
import stat
import time
from typing import Any

from hutch.config import Settings
from hutch.errors import InvalidError, NotFoundError
from hutch.models import FileEntry, RawOutput, SandboxRecord
from hutch.provider import Capabilities, CheckResult


class FakeProvider:
    name = "fake"
    capabilities = Capabilities(mounts=False, limits=frozenset({"memory", "pids", "cpus"}), files=True)

    def __init__(self, settings: Settings | None = None) -> None:
        self.sandboxes: dict[str, dict[str, bytes]] = {}
        self.calls: list[tuple[str, str]] = []

    async def check(self) -> list[CheckResult]:
        return [CheckResult("fake", True, "in-memory provider")]

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        self.calls.append(("create", rec.id))
        self.sandboxes[rec.id] = {}
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
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stdin: bytes | None,
        timeout: float | None,
        max_output: int,
    ) -> RawOutput:
        self._files(rec)
        self.calls.append(("exec", rec.id))
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
            if timeout is not None and seconds > timeout:
                await asyncio.sleep(timeout)
                return RawOutput(exit_code=137, signal=9, timed_out=True)
            await asyncio.sleep(seconds)
        else:
            msg = f"{prog}: command not found\n".encode()
            return RawOutput(exit_code=127, stderr=msg, stderr_bytes=len(msg), spawn_error=f"{prog}: not found")
        return RawOutput(exit_code=code, stdout=out[:max_output], stdout_bytes=len(out))

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

    async def close(self) -> None:
        return None
