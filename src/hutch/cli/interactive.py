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
from typing import Any
from urllib.parse import quote

import click

from hutch.cli.common import Ctx, SandboxCommand, emit, exit_code_for, fail, json_option
from hutch.cli.run import _explain, _write, exit_with
from hutch.errors import HutchError, UnavailableError


def attach(obj: Ctx, ref: str, req: dict[str, Any], tty: bool) -> dict[str, Any]:
    """Run ``req`` with this terminal's input forwarded; returns the final result."""
    from websockets.exceptions import WebSocketException

    obj.client.health()  # starts the daemon when needed
    size = shutil.get_terminal_size()
    try:
        with obj.client.endpoint.ws_connect(f"/v1/sandboxes/{quote(ref, safe='')}/attach") as ws:
            return _session(obj, ws, req, tty, size)
    except (OSError, WebSocketException) as exc:
        raise UnavailableError(f"the connection to the daemon broke: {exc}", hint="see hutch daemon logs") from exc


def _session(obj: Ctx, ws: Any, req: dict[str, Any], tty: bool, size: os.terminal_size) -> dict[str, Any]:
    from websockets.exceptions import WebSocketException

    ws.send(json.dumps({"type": "start", **req, "tty": tty, "rows": size.lines, "cols": size.columns}))
    stdin_fd = sys.stdin.fileno()
    raw = tty and os.isatty(stdin_fd)

    def pump() -> None:
        with contextlib.suppress(OSError, WebSocketException):
            while True:
                data = os.read(stdin_fd, 65536)
                if not data:
                    ws.send(json.dumps({"type": "eof"}))
                    return
                ws.send(json.dumps({"type": "stdin", "data": base64.b64encode(data).decode()}))

    def resize(*_: object) -> None:
        s = shutil.get_terminal_size()
        with contextlib.suppress(OSError, WebSocketException):
            ws.send(json.dumps({"type": "resize", "rows": s.lines, "cols": s.columns}))

    saved = None
    if raw:
        import termios
        import tty as ttymod

        saved = termios.tcgetattr(stdin_fd)
        ttymod.setraw(stdin_fd)
        signal.signal(signal.SIGWINCH, resize)
    threading.Thread(target=pump, daemon=True).start()
    final: dict[str, Any] | None = None
    try:
        for message in ws:
            event = json.loads(message)
            kind = event.get("type")
            if obj.json:
                emit(event, line=True)
            elif kind in ("stdout", "stderr"):
                _write(kind, event["data"], event.get("base64", False))
            if kind == "exit":
                final = event
                break
            if kind == "error":
                raise HutchError.from_dict(event)
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
    if final is None:
        raise UnavailableError("the run's stream ended before the run did", hint="see hutch runs SANDBOX")
    if not obj.json:
        _explain(final)
    return final


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("command", nargs=-1)
@click.option("--cwd", help="Working directory inside the sandbox.")
@json_option
@click.pass_obj
def shell(obj: Ctx, /, sandbox: str, command: tuple[str, ...], cwd: str | None) -> None:
    """An interactive terminal in a sandbox (default: bash, else sh); exits with its code."""
    argv = list(command) or ["/bin/sh", "-c", "command -v bash >/dev/null && exec bash -l || exec sh -l"]
    try:
        exit_with(attach(obj, sandbox, {"command": argv, "cwd": cwd, "env": {"TERM": os.environ.get("TERM", "xterm")}}, True))
    except HutchError as exc:
        fail(exc, obj.json, exit_code_for(exc, run_command=True))
