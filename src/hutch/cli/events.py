"""events: the audit stream. A readable table on a terminal; NDJSON with --json or when
stdout is not a terminal (a pipe, a file), so scripts always get one object per line."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import click

from hutch.cli.common import Ctx, SandboxCommand, count, json_option
from hutch.errors import InvalidError
from hutch.units import parse_duration

if TYPE_CHECKING:
    from hutch import wire

FOLLOW_INTERVAL = 0.25
PAGE = 1000
DETAIL_WIDTH = 100
# the table's columns: time, sandbox, run, type (fixed widths: --follow prints rows as they come)
COLUMNS = (("time", 19), ("sandbox", 23), ("run", 23), ("type", 18))


def parse_since(value: str) -> float:
    """A DURATION ago with its unit (``30s``, ``10m``, ``2h``, ``1d``), an ISO 8601 time, or
    epoch seconds (a bare number)."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    try:
        return time.time() - parse_duration(text)
    except InvalidError:
        raise InvalidError(f"invalid --since {value!r}", hint="use 10m, 2h, 1d, 2026-11-29T10:00 or epoch seconds") from None


def _value(v: object) -> str:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return shlex.join(v) if v else "[]"
    if isinstance(v, float):
        return f"{v:g}"
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def details(data: Mapping[str, object]) -> str:
    """``key=value`` for each field that says something (None and empty ones are left out)."""
    parts = [f"{k}={_value(v)}" for k, v in data.items() if v not in (None, "", [], {})]
    text = " ".join(parts)
    return text if len(text) <= DETAIL_WIDTH else text[: DETAIL_WIDTH - 3] + "..."


def row(ev: wire.Event) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ev["time"]))
    cells = (when, ev.get("sandbox_id") or "-", ev.get("run_id") or "-", ev["type"])
    line = "  ".join(c.ljust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True))
    return (line + "  " + details(ev.get("data") or {})).rstrip()


def header() -> str:
    return "  ".join(name.upper().ljust(w) for name, w in COLUMNS) + "  DETAILS"


@click.command(cls=SandboxCommand)
@click.argument("sandbox", required=False)
@click.option("--all", "-a", "all_", is_flag=True, help="Events of every sandbox.")
@click.option("--type", "types", multiple=True, metavar="TYPE", help="Only this event type (repeatable), e.g. run_finished.")
@click.option("--since", help="Only events since 10m, 2h, 1d ago, an ISO time or epoch seconds.")
@click.option("--run", "run_id", metavar="RUN", help="Only this run's events.")
@click.option("--limit", default=1000, show_default=True, type=count(1, 100000), metavar="N", help="At most this many events.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events.")
@json_option
@click.pass_obj
def events(
    obj: Ctx,
    /,
    sandbox: str | None,
    all_: bool,
    types: tuple[str, ...],
    since: str | None,
    run_id: str | None,
    limit: int,
    follow: bool,
) -> None:
    """The audit stream, oldest first: a table on a terminal; NDJSON (one object a line)
    with --json or when the output is not a terminal."""
    if not sandbox and not all_:
        raise click.UsageError("give a SANDBOX, or --all for every sandbox")
    as_table = not obj.json and sys.stdout.isatty()
    after, left, shown = 0, limit, 0
    when = parse_since(since) if since else None
    while True:
        batch = obj.client.events(
            sandbox if not all_ else None,
            types=list(types) or None,
            since=when,
            after=after,
            limit=min(left, PAGE) if not follow else PAGE,
            run=run_id,
        )
        for ev in batch:
            if as_table and not shown:
                click.echo(header())
            click.echo(row(ev) if as_table else json.dumps(ev))
            shown += 1
            after = ev["seq"]
        left -= len(batch)
        if not follow and (left <= 0 or len(batch) < PAGE):
            if as_table and not shown:
                click.echo("no events", err=True)
            if (
                left <= 0
                and batch
                and obj.client.events(  # oldest first: say when newer ones were left out
                    sandbox if not all_ else None, types=list(types) or None, since=when, after=after, limit=1, run=run_id
                )
            ):
                click.echo(f"hutch: only the first {limit} events shown; newer ones: --since 10m, or a larger --limit", err=True)
            return
        if follow and not batch:
            sys.stdout.flush()
            time.sleep(FOLLOW_INTERVAL)
