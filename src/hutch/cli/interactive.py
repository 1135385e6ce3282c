"""exec -i / -t and shell: a run that takes input, over the daemon's WebSocket."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click

from hutch.cli.common import Ctx, SandboxCommand, exit_code_for, fail, json_option
from hutch.cli.foreground import execute, exit_with
from hutch.errors import HutchError, UnavailableError
from hutch.wire.build import LOGIN_SHELL, attach_start, exec_request

if TYPE_CHECKING:
    from hutch import wire


class Attached:
    """A run's events over the attach WebSocket, with this process's stdin forwarded to the
    command as it comes (and this terminal's size and mode with ``tty``). Iterate, then
    ``close()``: closing hangs the run up, so Ctrl-C kills the run first (see foreground)."""

    def __init__(self, obj: Ctx, ref: str, req: wire.ExecRequest, tty: bool) -> None:
        from websockets.exceptions import WebSocketException

        obj.client.health()  # starts the daemon when needed
        size = shutil.get_terminal_size()
        try:
            self.ws = obj.client.endpoint.ws_connect(f"/v1/sandboxes/{quote(ref, safe='')}/attach")
        except (OSError, WebSocketException) as exc:
            raise UnavailableError(f"the connection to the daemon broke: {exc}", hint="see hutch daemon logs") from exc
        self.done = False
        self.saved: Any = None
        self.stdin_fd = sys.stdin.fileno()
        try:
            self.ws.send(json.dumps(attach_start(req, tty=tty, rows=size.lines, cols=size.columns)))
        except (OSError, WebSocketException) as exc:
            self.close()
            raise UnavailableError(f"the connection to the daemon broke: {exc}", hint="see hutch daemon logs") from exc
        if tty and os.isatty(self.stdin_fd):
            import termios
            import tty as ttymod

            self.saved = termios.tcgetattr(self.stdin_fd)
            ttymod.setraw(self.stdin_fd, termios.TCSANOW)  # TCSAFLUSH (the default) would drop what was typed ahead
            signal.signal(signal.SIGWINCH, self._resize)
        self.pending: dict[str, Any] | None = None

    def first(self) -> dict[str, Any]:
        """The first event (``run``, or the error that refused the run), kept for iteration."""
        self.pending = next(self)
        return self.pending

    def _pump(self) -> None:  # a full connection blocks here: the input waits for the command
        from websockets.exceptions import WebSocketException

        with contextlib.suppress(OSError, WebSocketException):
            while True:
                data = os.read(self.stdin_fd, 65536)
                if not data:
                    self.ws.send(json.dumps({"type": "eof"}))
                    return
                self.ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(data).decode()}))

    def _resize(self, *_: object) -> None:
        from websockets.exceptions import WebSocketException

        s = shutil.get_terminal_size()
        with contextlib.suppress(OSError, WebSocketException):
            self.ws.send(json.dumps({"type": "resize", "rows": s.lines, "cols": s.columns}))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosedOK, WebSocketException

        if self.pending is not None:
            held, self.pending = self.pending, None
            return held
        if self.done:
            raise StopIteration
        try:
            event: dict[str, Any] = json.loads(self.ws.recv())
        except ConnectionClosedOK:
            raise StopIteration from None
        except (OSError, WebSocketException) as exc:
            raise UnavailableError(f"the connection to the daemon broke: {exc}", hint="see hutch daemon logs") from exc
        self.done = event.get("type") in ("exit", "error")
        if event.get("type") == "run":  # stdin is read only once the run exists
            threading.Thread(target=self._pump, daemon=True).start()
        return event

    def close(self) -> None:
        from websockets.exceptions import WebSocketException

        if self.saved is not None:
            import termios

            termios.tcsetattr(self.stdin_fd, termios.TCSADRAIN, self.saved)
            self.saved = None
        with contextlib.suppress(OSError, WebSocketException):
            self.ws.close()


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("command", nargs=-1)
@click.option("--cwd", help="Working directory inside the sandbox.")
@json_option
@click.pass_obj
def shell(obj: Ctx, /, sandbox: str, command: tuple[str, ...], cwd: str | None) -> None:
    """An interactive terminal in a sandbox (default: bash, else sh); exits with its code."""
    req = exec_request(list(command) or LOGIN_SHELL, cwd=cwd, env={"TERM": os.environ.get("TERM", "xterm")})
    try:
        exit_with(execute(obj, sandbox, req, True, interactive=True, tty=True))
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))
