"""The CLI starts fast: loading the command tree imports none of the heavy libraries.

pydantic (the models), httpx, rich, fastapi/uvicorn and the providers are imported only by the
commands that use them, when they run; each of them costs tens of milliseconds per call.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

HEAVY = ("pydantic", "httpx", "rich", "fastapi", "starlette", "uvicorn", "yaml", "jsonschema", "hutch.models", "hutch.providers")
# What hutch exec and hutch run no longer load (each a few ms to tens of ms per call): the
# event loop, TLS, http.client and the email parser it uses, thread pools, logging; the async
# client's module, subprocess (only a call that finds no daemon starts one) and the TOML
# parser (only a config or credentials file that exists is parsed).
RUN_PATH_FREE = ("asyncio", "ssl", "email", "http", "concurrent", "logging", "hutch.client.aio", "subprocess", "tomllib", *HEAVY)
# ... and, run for real (tests/integration/test_cli_run_imports.py), the attach client (only
# -i, -t or a piped stdin use it) and the IDNA codec (the socket's Host is ASCII).
RUN_CALL_FREE = (*RUN_PATH_FREE, "hutch.cli.interactive", "encodings.idna", "unicodedata", "stringprep")
# ... and the plain forms (hutch exec SANDBOX -- CMD, hutch run -- CMD) none of the standard
# library's heavier modules: typing, re and enum (with json, pathlib, socket.py, signal.py,
# urllib.parse, platformdirs ... which import them) were two thirds of hutch exec's start.
PLAIN_FREE = (
    "typing",
    "re",
    "enum",
    "json",
    "pathlib",
    "socket",
    "signal",
    "urllib",
    "ipaddress",
    "fnmatch",
    "collections",
    "contextlib",
    "functools",
    "base64",
    "importlib",
    "warnings",
    "platformdirs",
    "dataclasses",
    "datetime",
    "random",
    "tomllib",
)
PLAIN_EXEC_FREE = (*PLAIN_FREE, "threading", "queue")  # (hutch run reads its answer on a thread)


def loaded_by(code: str) -> list[str]:
    """The modules loaded after ``code`` (which must not import json itself: the list is
    printed with repr, and read here)."""
    out = subprocess.run(
        [sys.executable, "-c", code + "; print(sorted(sys.modules))"], capture_output=True, text=True, check=True
    )
    return list(ast.literal_eval(out.stdout))


def banned(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if m.split(".")[0] in names or m in names or m.startswith(tuple(n + "." for n in names))]


def test_loading_the_cli_imports_nothing_heavy() -> None:
    code = "import sys, json, hutch.cli; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY or m.startswith(HEAVY)]
    assert heavy == []
    # the command tree (click) is loaded by main when the command needs it, not by the package
    assert [m for m in loaded if m.split(".")[0] == "click" or m == "hutch.cli.tree"] == []


def test_the_plain_exec_path_needs_no_click() -> None:
    """hutch.cli.plain (hutch exec SANDBOX -- CMD with no option) and what it runs import no click."""
    code = "import sys, hutch.cli.plain, hutch.cli.foreground, hutch.wire.build, hutch.client"
    loaded = loaded_by(code)
    assert banned(loaded, ("click", "hutch.cli.tree", "hutch.cli.common", "hutch.cli.run", *RUN_PATH_FREE)) == []


def test_the_plain_paths_modules_load_no_heavy_standard_library() -> None:
    """What hutch exec and hutch run import before they speak to the daemon: no typing, re,
    enum, json, pathlib, socket.py ... (a real call is checked in test_cli_run_imports.py)."""
    code = (
        "import sys, os; from hutch.cli import plain; from hutch.cli.base import Ctx;"
        " from hutch.client.sync import Client; from hutch.config import Settings; from hutch.wire import build;"
        " s = Settings.load(); c = Client(s, autostart=False); build.exec_request(['true'], env={}, redact=True)"
    )
    loaded = loaded_by(code)
    assert banned(loaded, PLAIN_EXEC_FREE) == []
    loaded = loaded_by(code + "; from hutch.cli import oneshot, specs; from hutch.client import oneshot as o")
    assert banned(loaded, PLAIN_FREE) == []


def test_the_exec_and_run_commands_load_only_their_own_modules() -> None:
    """The command tree is lazy: resolving exec or run imports hutch.cli.run and what it
    needs (the sync client over a small HTTP/1.1 connection), none of the other groups."""
    code = "import sys, click, hutch.cli as c; ctx = click.Context(c.cli); [c.cli.get_command(ctx, n) for n in ('exec', 'run')]"
    loaded = loaded_by(code)
    assert banned(loaded, RUN_PATH_FREE) == []
    assert "hutch.cli.run" in loaded
    others = ("ssh", "agents", "benchmark", "workspace")
    assert [m for m in loaded if m.startswith("hutch.cli.") and m.split(".")[2] in others] == []


def test_every_command_still_resolves_for_help_and_completion() -> None:
    import click

    from hutch.cli import COMMANDS, cli

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
