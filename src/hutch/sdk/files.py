"""``sbx.files``: read, write and list files in a sandbox."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from hutch.errors import InvalidError
from hutch.sdk.results import FileInfo, _data

if TYPE_CHECKING:
    from hutch import wire
    from hutch.sdk.aio import AsyncSandbox
    from hutch.sdk.sync import Sandbox


def _whole(path: str, got: tuple[bytes, bool]) -> bytes:
    """The file's bytes, or an error when it was cut (it is larger than a read returns)."""
    data, truncated = got
    if truncated:
        raise InvalidError(
            f"{path} is larger than 64 MiB, the most files.read returns",
            hint=f"copy it out whole with exec(['cat', {path!r}], max_output=SIZE), or into /workspace and pull()",
        )
    return data


class Files:
    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> wire.FileWritten:
        return self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    def read(self, path: str) -> bytes:
        return _whole(path, self._sbx.client.read_file(self._sbx.id, path))

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in self._sbx.client.list_files(self._sbx.id, path)]


class AsyncFiles:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> wire.FileWritten:
        return await self._sbx.client.write_file(self._sbx.id, path, _data(data), mode)

    async def read(self, path: str) -> bytes:
        return _whole(path, await self._sbx.client.read_file(self._sbx.id, path))

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode()

    async def list(self, path: str | None = None) -> builtins.list[FileInfo]:
        return [FileInfo(**e) for e in await self._sbx.client.list_files(self._sbx.id, path)]
