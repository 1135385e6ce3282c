"""runs, poll, wait, kill, logs, ps: following and controlling runs (events: cli/events.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from hutch.cli.common import DURATION, EXIT_FAILED, SIZE, Ctx, SandboxCommand, emit, human_bytes, json_option, old_spelling, table
from hutch.cli.foreground import exit_with
from hutch.cli.foreground import write_chunk as _write

if TYPE_CHECKING:
    from hutch import wire

FOLLOW_INTERVAL = 0.25
PAGE = 1 << 20  # --max-bytes by default


def _when(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "-"


def _command(cmd: str | list[str]) -> str:
    text = cmd if isinstance(cmd, str) else " ".join(cmd)
    return text if len(text) <= 60 else text[:57] + "..."


@click.command("runs", cls=SandboxCommand)
@click.argument("sandbox")
@click.option(
    "--status",
    type=click.Choice(["running", "completed", "failed", "timed_out", "killed", "oom_killed", "lost"]),
    help="Only runs in this state.",
)
@json_option
@click.pass_obj
def runs_(obj: Ctx, /, sandbox: str, status: str | None) -> None:
    """List a sandbox's runs, oldest first."""
    runs = obj.client.runs(sandbox, status)
    if obj.json:
        emit(runs)
        return
    rows = [
        [
            r["id"],
            r["status"],
            "-" if r["exit_code"] is None else str(r["exit_code"]),
            "bg" if r["background"] else "fg",
            _when(r["started_at"]),
            f"{(r['duration_ms'] or 0) / 1000:.2f}s" if r["duration_ms"] else "-",
            _command(r["command"]),
        ]
        for r in runs
    ]
    table(rows, ["run", "status", "exit", "mode", "started", "took", "command"])


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--follow", "-f", is_flag=True, help="Keep printing output until the run ends.")
@click.option("--stdout-offset", default=0, type=click.IntRange(min=0), help="Resume stdout from this byte.")
@click.option("--stderr-offset", default=0, type=click.IntRange(min=0), help="Resume stderr from this byte.")
@click.option("--max-bytes", type=SIZE, help="At most this much of each stream per request (default 1M).")
@json_option
@old_spelling("--limit", "--max-bytes", "max_bytes", type=SIZE)
@click.pass_obj
def poll(obj: Ctx, /, run_id: str, follow: bool, stdout_offset: int, stderr_offset: int, max_bytes: int | None) -> None:
    """Print a run's status and output so far (with offsets to resume from).

    With --json: one document (output and next offsets); with --follow, NDJSON events
    (stdout, stderr, then status) until the run ends.
    """
    page = max_bytes or PAGE
    offsets = {"stdout": stdout_offset, "stderr": stderr_offset}
    while True:
        res = obj.client.output(run_id, offsets["stdout"], offsets["stderr"], page)
        if obj.json and not follow:
            emit(res)
            _cut_loudly(res)
            return
        for name in ("stdout", "stderr"):
            chunk = res[name]
            if chunk["data"]:
                if obj.json:
                    emit(
                        {
                            "type": name,
                            "data": chunk["data"],
                            "base64": chunk["base64"],
                            "offset": chunk["offset"],
                            "next_offset": chunk["next_offset"],
                        },
                        line=True,
                    )
                else:
                    _write(name, chunk["data"], chunk["base64"])
            offsets[name] = chunk["next_offset"]
        run = res["run"]
        if res["done"] or (not follow and not _more(res)):
            if obj.json:
                emit({"type": "status", "run": run, "next_offsets": offsets}, line=True)
            else:
                state = run["status"] + ("" if run["exit_code"] is None else f" (exit {run['exit_code']})")
                click.echo(
                    f"hutch: {run_id} {state}; resume with --stdout-offset {offsets['stdout']} "
                    f"--stderr-offset {offsets['stderr']}",
                    err=True,
                )
            _cut_loudly(res)
            return
        if not _more(res):
            time.sleep(FOLLOW_INTERVAL)


def _cut_loudly(res: wire.OutputPage) -> None:
    """Once all that was kept is read: a stored copy cut at the disk cap fails the command."""
    run = res["run"]
    if not (res["done"] and run.get("truncated")):
        return
    kept = f"stdout {res['stdout']['size']} of {run['stdout_bytes']} bytes"
    kept += f", stderr {res['stderr']['size']} of {run['stderr_bytes']}"
    click.echo(
        f"hutch: {run['id']}'s output kept on disk stops at the disk cap ({kept} kept); the rest was not kept",
        err=True,
    )
    click.echo("hint: stream such output whole with a foreground hutch exec, or write it to a file in the sandbox", err=True)
    raise SystemExit(EXIT_FAILED)


def _cut_runs_loudly(obj: Ctx, sandbox: str, seen: set[str]) -> None:
    """At the end of the transcript: runs shown whose kept output stops at the disk cap fail the command."""
    cut = [r for r in obj.client.runs(sandbox) if r["id"] in seen and r["truncated"]] if seen else []
    for r in cut:
        click.echo(
            f"hutch: {r['id']}'s output kept on disk stops at the disk cap (it wrote stdout {r['stdout_bytes']} bytes, "
            f"stderr {r['stderr_bytes']}); the rest was not kept",
            err=True,
        )
    if cut:
        raise SystemExit(EXIT_FAILED)


def _more(res: wire.OutputPage) -> bool:
    return any(page["next_offset"] < page["size"] for page in (res["stdout"], res["stderr"]))


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--timeout", type=DURATION, help="Give up after this long, e.g. 30s, 10m (exit 124).")
@json_option
@click.pass_obj
def wait(obj: Ctx, /, run_id: str, timeout: float | None) -> None:
    """Block until a run ends; exit with its exit code (124 if it timed out)."""
    run = obj.client.wait(run_id, timeout)
    if obj.json:
        emit(run)
    else:
        click.echo(f"{run_id} {run['status']}" + ("" if run["exit_code"] is None else f" (exit {run['exit_code']})"))
    exit_with({"status": run["status"], "exit_code": 125 if run["exit_code"] is None else run["exit_code"]})


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--signal", "-s", "sig", default="TERM", show_default=True, help="TERM, KILL, INT, HUP, QUIT, USR1, USR2 or a number."
)
@json_option
@click.pass_obj
def kill(obj: Ctx, /, run_id: str, sig: str) -> None:
    """Signal a run's whole process tree (succeeds, and says so, if it already ended)."""
    res = obj.client.kill(run_id, sig)
    emit(res) if obj.json else click.echo(f"{run_id}: {res['message']}")


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.option("--run", "run_id", metavar="RUN", help="Only this run's output.")
@click.option("--offset", default=0, type=click.IntRange(min=0), help="Start at this transcript offset (from next_offset).")
@click.option("--max-bytes", type=SIZE, help="Read at most this much of the transcript per request (default 1M).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until every run has ended.")
@json_option
@old_spelling("--limit", "--max-bytes", "max_bytes", type=SIZE)
@click.pass_obj
def logs(obj: Ctx, /, sandbox: str, run_id: str | None, offset: int, max_bytes: int | None, follow: bool) -> None:
    """The sandbox's combined, ordered output of its runs (resumable with --offset).

    --json prints one document per read: records, offset, next_offset, eof.
    """
    page = max_bytes or PAGE
    seen: set[str] = set()
    end: int | None = None  # without --follow: the transcript's size at the first read, read up to it page by page
    while True:
        res = obj.client.logs(sandbox, run_id, offset, page)
        if obj.json:
            emit(res, line=follow)
        else:
            for r in res["records"]:
                _write(r["stream"], r["data"], r["base64"])
        seen.update(r["run_id"] for r in res["records"])
        moved = res["next_offset"] > offset
        offset = res["next_offset"]
        end = res["size"] if end is None else end
        if not follow and not obj.json and moved and offset < end:
            continue
        if not follow or res["eof"]:
            if not obj.json and follow:
                click.echo(f"hutch: end of transcript at offset {offset}", err=True)
            if res["eof"]:
                _cut_runs_loudly(obj, sandbox, seen)
            return
        if not moved:
            time.sleep(FOLLOW_INTERVAL)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@json_option
@click.pass_obj
def ps(obj: Ctx, /, sandbox: str) -> None:
    """Processes in a sandbox (pids as seen inside it)."""
    procs = obj.client.ps(sandbox)
    if obj.json:
        emit(procs)
        return
    rows = [
        [
            str(p["pid"]),
            str(p["ppid"]),
            p["user"],
            p["state"],
            f"{p['cpu_seconds']:.2f}" if "cpu_seconds" in p else "-",  # not every provider can tell
            human_bytes(p["rss"]),
            p["command"][:80],
        ]
        for p in procs
    ]
    table(rows, ["pid", "ppid", "user", "state", "cpu", "rss", "command"])
