"""SDK runs: Run / AsyncRun (wait, kill, stream) and sbx.runs."""

from __future__ import annotations

import base64
import builtins
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from hutch.client import AsyncClient, Client
from hutch.sdk.results import ExecResult, OutputChunk

if TYPE_CHECKING:
    from hutch import wire
    from hutch.sdk import AsyncSandbox, Sandbox

Offsets = dict["wire.StreamName", int]
STREAMS: tuple[wire.StreamName, wire.StreamName] = ("stdout", "stderr")


def _chunks(res: wire.OutputPage) -> list[OutputChunk]:
    out = []
    for name in STREAMS:
        part = res[name]
        if part["data"]:
            data = base64.b64decode(part["data"]) if part["base64"] else part["data"].encode()
            out.append(OutputChunk(name, data, part["offset"]))
    return out


class Run:
    """A run started with ``background=True`` (or found with ``sbx.runs``)."""

    def __init__(self, info: wire.RunRecord, client: Client) -> None:
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

    def refresh(self) -> wire.RunRecord:
        self.info = self.client.run(self.id)
        return self.info

    def wait(self, timeout: float | None = None, max_output: int = 1 << 20) -> ExecResult:
        """Block until the run ends (TimeoutError_ kind ``timeout`` after ``timeout`` s)."""
        self.info = self.client.wait(self.id, timeout)
        res = self.client.output(self.id, 0, 0, min(max_output, 16 << 20))
        return ExecResult.from_run(self.info, *_raw_pair(res), cap=max_output)

    def kill(self, signal: str | int = "TERM") -> wire.KillResult:
        return self.client.kill(self.id, signal)

    def stream(self, interval: float = 0.2) -> Iterator[OutputChunk]:
        """Output as it is written, until the run ends; resumable by offset."""
        offsets: Offsets = {"stdout": 0, "stderr": 0}
        while True:
            res = self.client.output(self.id, offsets["stdout"], offsets["stderr"])
            yield from _chunks(res)
            self.info, state = _advance(res, offsets)
            if state == "done":
                return
            if state == "idle":
                time.sleep(interval)


def _advance(res: wire.OutputPage, offsets: Offsets) -> tuple[wire.RunRecord, str]:
    """Move ``offsets`` past one output page: the run record, and done, idle or more."""
    for name in offsets:
        offsets[name] = res[name]["next_offset"]
    if res["done"]:
        return res["run"], "done"
    more = any(res[n]["next_offset"] < res[n]["size"] for n in offsets)
    return res["run"], "more" if more else "idle"


def _raw_pair(res: wire.OutputPage) -> tuple[bytes, bytes]:
    pair = []
    for name in STREAMS:
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

    def __init__(self, info: wire.RunRecord, client: AsyncClient) -> None:
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

    async def refresh(self) -> wire.RunRecord:
        self.info = await self.client.run(self.id)
        return self.info

    async def wait(self, timeout: float | None = None, max_output: int = 1 << 20) -> ExecResult:
        self.info = await self.client.wait(self.id, timeout)
        res = await self.client.output(self.id, 0, 0, min(max_output, 16 << 20))
        return ExecResult.from_run(self.info, *_raw_pair(res), cap=max_output)

    async def kill(self, signal: str | int = "TERM") -> wire.KillResult:
        return await self.client.kill(self.id, signal)

    async def stream(self, interval: float = 0.2) -> AsyncIterator[OutputChunk]:
        offsets: Offsets = {"stdout": 0, "stderr": 0}
        while True:
            res = await self.client.output(self.id, offsets["stdout"], offsets["stderr"])
            for chunk in _chunks(res):
                yield chunk
            self.info, state = _advance(res, offsets)
            if state == "done":
                return
            if state == "idle":
                import asyncio  # here, not at the top: the sync SDK never pays for asyncio (~30 ms)

                await asyncio.sleep(interval)


class AsyncRuns:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def list(self, status: str | None = None) -> builtins.list[AsyncRun]:
        return [AsyncRun(r, self._sbx.client) for r in await self._sbx.client.runs(self._sbx.id, status)]

    async def get(self, run_id: str) -> AsyncRun:
        return AsyncRun(await self._sbx.client.run(run_id), self._sbx.client)
