"""SDK terminal sessions: Pty / AsyncPty over the daemon's attach WebSocket."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from hutch.errors import HutchError
from hutch.sdk.results import _data
from hutch.wire.build import LOGIN_SHELL, attach_start, exec_request

if TYPE_CHECKING:
    from hutch import wire


def _take(session: Pty | AsyncPty, event: wire.ExecFrame) -> bytes:
    """Apply one attach event to a session; the output bytes it carries (b"" if none)."""
    if event["type"] == "run":
        session.run_id = event["run_id"]
    elif event["type"] == "stdout" or event["type"] == "stderr":
        return base64.b64decode(event["data"]) if event["base64"] else event["data"].encode()
    elif event["type"] == "exit":
        session.exit_code = int(event["exit_code"])
    elif event["type"] == "error":
        raise HutchError.from_dict(event)
    return b""


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
            data = _take(self, json.loads(self._ws.recv(timeout=timeout)))
            if data:
                return data
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

            data = _take(self, json.loads(await asyncio.wait_for(self._ws.recv(), timeout)))
            if data:
                return data
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
    req = exec_request(command or LOGIN_SHELL, env={"TERM": "xterm"} | (env or {}), cwd=cwd, timeout=timeout)
    return json.dumps(attach_start(req, tty=True, rows=rows, cols=cols))


def _attach_path(sandbox_id: str) -> str:
    return f"/v1/sandboxes/{sandbox_id}/attach"
