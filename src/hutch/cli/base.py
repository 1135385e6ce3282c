"""What every command and the plain exec and run paths share, without click: the context
(settings and the client, made on first use), JSON output, the error/exit-code contract
and ``K=V`` pairs (the progress bar of a push is :mod:`hutch.cli.progress`).

``hutch exec SANDBOX -- CMD`` and ``hutch run -- CMD`` with no option run without click (see
:mod:`hutch.cli.plain`): click's import is a third of those processes' start. Those paths
load none of ``typing``, ``re``, ``json``, ``pathlib``, ``socket`` or ``signal`` either
(tests/unit/test_cli_imports.py).
"""

from __future__ import annotations

import os
import sys

from hutch.errors import InvalidError

TYPE_CHECKING = False  # typing, json and what they import stay out of the plain paths' start
if TYPE_CHECKING:
    from typing import Any

    from hutch.client import Client
    from hutch.config import Settings
    from hutch.errors import HutchError

# Exit codes (DESIGN.md): workload code passes through for run/exec.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_HUTCH = 125
RED, RESET = "\x1b[31m", "\x1b[0m"


class Ctx:
    def __init__(self) -> None:
        self.json = False
        self._client: Client | None = None
        self.settings_flags: dict[str, Any] = {}

    @property
    def settings(self) -> Settings:
        return self.client.settings

    @property
    def client(self) -> Client:
        if self._client is None:
            from hutch.client import Client
            from hutch.config import Settings

            self._client = Client(Settings.load(**self.settings_flags))
        return self._client


# How a command line can end besides returning: its exit code, Ctrl-C, a reader that went away.
ENDINGS = (SystemExit, KeyboardInterrupt, BrokenPipeError)


def exit_status(exc: BaseException) -> int:
    """The process's exit code for one of :data:`ENDINGS`: SystemExit's code (a message is 1),
    130 after Ctrl-C (128 + SIGINT), 0 when stdout's reader left."""
    if isinstance(exc, SystemExit):
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 130 if isinstance(exc, KeyboardInterrupt) else 0


def say(text: str, color: str | None = None) -> None:
    """One line on stderr (``color``, an ANSI colour, only on a terminal); stderr replaces
    what its encoding cannot show, so a message never fails to print."""
    if color and sys.stderr.isatty():
        text = f"{color}{text}{RESET}"
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def emit(obj: Any, line: bool = False) -> None:
    """One JSON document; ``line`` for NDJSON streams (never indented, flushed at once)."""
    import json  # (its indented form is json's)

    sys.stdout.write(json.dumps(obj, indent=None if line or not sys.stdout.isatty() else 2, default=str) + "\n")
    sys.stdout.flush()


def exit_code_for(exc: HutchError, run_command: bool) -> int:
    """DESIGN's contract: bad input is a usage error (2); run/exec report hutch's own
    failures as 125 and timeouts as 124; other commands fail with 1."""
    if exc.kind == "invalid":
        return EXIT_USAGE
    if exc.kind == "timeout":
        return EXIT_TIMEOUT  # exec/run --timeout, wait --timeout ...
    if run_command:
        return EXIT_HUTCH
    return EXIT_FAILED


def fail(exc: HutchError, as_json: bool, code: int = EXIT_FAILED) -> None:
    if as_json:
        emit(exc.to_dict())
    else:
        say(f"hutch: {exc.kind}: {exc.message}", RED)
        if exc.hint:
            say(f"hint: {exc.hint}")
    raise SystemExit(code)


def parse_pairs(values: tuple[str, ...], what: str, from_env: bool = False) -> dict[str, str]:
    """``K=V`` pairs; with ``from_env``, a bare ``K`` takes its value from the environment."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not key:
            raise InvalidError(f"invalid {what} {item!r}", hint=f"use {what.upper()}=VALUE")
        if not sep:
            if not from_env:
                raise InvalidError(f"invalid {what} {item!r}", hint=f"use {what.upper()}=VALUE")
            if key not in os.environ:
                raise InvalidError(f"--env {key}: not set in this environment", hint=f"export {key}, or pass {key}=VALUE")
            value = os.environ[key]
        out[key] = value
    return out
