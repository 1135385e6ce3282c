"""A live sandbox's files: read (whole, or a page), write, list; each bounded by
:data:`MAX_FILE` and recorded as an event. A relative path is under the sandbox's workdir."""

from __future__ import annotations

import builtins
import os
from typing import TYPE_CHECKING, Any

from hutch.checks import check_mode, check_path
from hutch.errors import InvalidError
from hutch.models import FileEntry, SandboxRecord
from hutch.provider import ranged_reads

if TYPE_CHECKING:
    from hutch.service import Service

MAX_FILE = 64 << 20


def sandbox_path(rec: SandboxRecord, path: str) -> str:
    """``path`` checked, and made absolute in the sandbox (relative: under its workdir)."""
    if not path:
        raise InvalidError("empty path")
    check_path(path)
    return path if path.startswith("/") else os.path.join(rec.spec.workdir, path)


class Files:
    def __init__(self, service: Service) -> None:
        self.svc = service

    async def read(self, ref: str, path: str, limit: int = MAX_FILE) -> tuple[bytes, bool]:
        svc = self.svc
        rec = svc.live(ref)
        full = sandbox_path(rec, path)
        data, truncated = await svc._guarded(rec, svc.provider(rec.provider).read_file(rec, full, min(limit, MAX_FILE)))
        svc.store.events.append("file_read", rec.id, path=full, size=len(data))
        return data, truncated

    async def read_range(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        """A page of a file: ``limit`` bytes from ``offset``, whether more follow, and its size if known.

        Providers that can read at an offset do (the local one); others read up to the end of
        the page and the page is cut here.
        """
        svc = self.svc
        rec = svc.live(ref)
        full = sandbox_path(rec, path)
        limit = min(limit, MAX_FILE)
        provider = svc.provider(rec.provider)
        if provider.capabilities.ranged_reads:
            data, more, total = await svc._guarded(rec, ranged_reads(provider).read_range(rec, full, offset, limit))
            size: int | None = int(total)
        else:
            whole, cut = await svc._guarded(rec, provider.read_file(rec, full, min(offset + limit, MAX_FILE)))
            data, more = whole[offset : offset + limit], cut
            size = None if cut else len(whole)
        svc.store.events.append("file_read", rec.id, path=full, size=len(data), offset=offset)
        return data, more, size

    async def write(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> dict[str, Any]:
        svc = self.svc
        mode = check_mode(mode)
        rec = svc.live(ref)
        if len(data) > MAX_FILE:
            raise InvalidError(f"file is {len(data)} bytes; the limit is {MAX_FILE}", hint="split it, or use --mount")
        full = sandbox_path(rec, path)
        await svc._guarded(rec, svc.provider(rec.provider).write_file(rec, full, data, mode))
        svc.store.events.append("file_written", rec.id, path=full, size=len(data))
        return {"sandbox": rec.id, "path": full, "size": len(data)}

    async def list(self, ref: str, path: str | None = None) -> builtins.list[FileEntry]:
        rec = self.svc.live(ref)
        listing = self.svc.provider(rec.provider).list_files(rec, sandbox_path(rec, path or rec.spec.workdir))
        return await self.svc._guarded(rec, listing)
