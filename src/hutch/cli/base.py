"""What every command and the plain exec path share, without click: the context (settings
and the client, made on first use), JSON output, the error/exit-code contract.

``hutch exec SANDBOX -- CMD`` with no option runs on this module alone (see
:mod:`hutch.cli.plain`): click's import is a third of that process's start.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
