"""Files of a unikraft sandbox, through the sandbox plugin's fs API (mixed into the provider)."""

from __future__ import annotations

import base64
import os
import shlex
from typing import Any

from hutch.errors import InvalidError, NotFoundError
from hutch.models import FileEntry, RawOutput, SandboxRecord
from hutch.providers.unikraft.api import Reply


class FilesMixin:
    async def _plugin(self, rec: SandboxRecord, method: str, path: str, what: str, **kw: Any) -> Reply:
        raise NotImplementedError  # the provider's own

    async def _sh(self, rec: SandboxRecord, script: str, timeout: float = 60.0) -> RawOutput:
        raise NotImplementedError  # the provider's own

    # -- files -----------------------------------------------------------------------------------

    async def read_file(self, rec: SandboxRecord, path: str, limit: int) -> tuple[bytes, bool]:
        reply = await self._plugin(rec, "POST", "/fs/read", f"reading {path}", ok=(200, 404, 500), body={"path": path})
        if reply.status != 200:
            raise NotFoundError(f"{path}: cannot read ({reply.message or reply.status})", hint="check the path")
        data = base64.b64decode(reply.data.get("contents") or "")
        return data[:limit], len(data) > limit

    async def write_file(self, rec: SandboxRecord, path: str, data: bytes, mode: int) -> None:
        if path.endswith("/"):
            raise InvalidError(f"{path}: is a directory")
        parent = os.path.dirname(path) or "/"
        await self._plugin(rec, "POST", "/fs/mkdir", f"creating {parent}", body={"path": parent, "parents": True})
        body = {"path": path, "append": False, "encoding": "base64", "data": base64.b64encode(data).decode()}
        await self._plugin(rec, "POST", "/fs/write", f"writing {path}", body=body)
        if mode != 0o644:
            await self._sh(rec, f"chmod {mode:o} {shlex.quote(path)}")

    async def list_files(self, rec: SandboxRecord, path: str) -> list[FileEntry]:
        script = f"find {shlex.quote(path)} -mindepth 1 -maxdepth 1 -printf '%y %s %m %T@ %f\\n'"
        raw = await self._sh(rec, script)
        if raw.exit_code != 0:
            raise NotFoundError(f"{path}: {raw.stderr.decode(errors='replace').strip() or 'cannot list'}")
        entries = []
        for line in raw.stdout.decode(errors="replace").splitlines():
            kind, size, mode, mtime, name = line.split(" ", 4)
            type_ = {"f": "file", "d": "dir", "l": "symlink"}.get(kind, "other")
            entries.append(FileEntry(name=name, type=type_, size=int(size), mode=int(mode, 8), mtime=float(mtime)))
        return sorted(entries, key=lambda e: e.name)
