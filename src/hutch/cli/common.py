"""Shared CLI plumbing: --json, rendering, the error/exit-code contract."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hutch.client import Client
from hutch.config import Settings
from hutch.errors import HutchError, InvalidError

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes (DESIGN.md): workload code passes through for run/exec.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_HUTCH = 125


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
            self._client = Client(Settings.load(**self.settings_flags))
        return self._client


class SandboxCommand(click.Command):
    """A command whose first argument is a sandbox. ``--session-id ID`` is an alias of
    that argument (agent users call a sandbox a session): it is moved into its place
    before parsing, so ``hutch exec --session-id ID -- CMD`` works like ``hutch exec ID -- CMD``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--session-id"],
                metavar="ID",
                expose_value=False,
                help="The sandbox (id or name), as an option: an alias of the SANDBOX argument.",
            )
        )

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        end = args.index("--") if "--" in args else len(args)
        for i, arg in enumerate(args[:end]):
            if arg == "--session-id" and i + 1 < end:
                value = args[i + 1]
                del args[i : i + 2]
                args.insert(0, value)
                break
            if arg.startswith("--session-id="):
                del args[i]
                args.insert(0, arg.partition("=")[2])
                break
        return super().parse_args(ctx, args)


def json_option(f: F) -> F:
    def set_json(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(Ctx).json = True
        return value

    return click.option(
        "--json",
        "json_",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=set_json,
        help='Print one JSON document on stdout (errors as {"error": {...}}).',
    )(f)


def emit(obj: Any, line: bool = False) -> None:
    """One JSON document; ``line`` for NDJSON streams (never indented, flushed at once)."""
    click.echo(json.dumps(obj, indent=None if line or not sys.stdout.isatty() else 2, default=str))
    if line:
        sys.stdout.flush()


def exit_code_for(exc: HutchError, run_command: bool) -> int:
    """DESIGN's contract: bad input is a usage error (2); run/exec report hutch's own
    failures as 125 and timeouts as 124; other commands fail with 1."""
    if exc.kind == "invalid":
        return EXIT_USAGE
    if exc.kind == "timeout":
        return EXIT_TIMEOUT  # exec/run --timeout, wait --timeout ...
    if run_command:
        return EXIT_TIMEOUT if exc.kind == "timeout" else EXIT_HUTCH
    return EXIT_FAILED


def fail(exc: HutchError, as_json: bool, code: int = EXIT_FAILED) -> None:
    if as_json:
        emit(exc.to_dict())
    else:
        click.secho(f"hutch: {exc.kind}: {exc.message}", fg="red", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
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


def table(rows: list[list[str]], headers: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
