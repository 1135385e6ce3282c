"""doctor, serve, daemon status|start|stop|logs."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import click

from hutch.cli.common import Ctx, emit, json_option
from hutch.config import Settings
from hutch.errors import HutchError, UnavailableError
from hutch.server.launcher import daemon_pid, ensure_daemon, socket_answers


def _daemon_status(settings: Settings) -> dict[str, Any]:
    up = socket_answers(settings.socket_path)
    return {
        "running": up,
        "pid": daemon_pid(settings) if up else None,
        "socket": str(settings.socket_path),
        "log": str(settings.log_path),
        "home": str(settings.home),
    }


@click.command()
@click.option("--provider", help="Check this provider (default: the configured one, local). Read-only.")
@json_option
@click.pass_obj
def doctor(obj: Ctx, provider: str | None) -> None:
    """Check that sandboxes can run here, and say how to fix what cannot."""
    import asyncio

    from hutch.service import Service

    settings = Settings.load(**obj.settings_flags)
    try:
        report = asyncio.run(_doctor(Service(settings), provider))
    except HutchError as exc:
        report = {"ok": False, "checks": [{"name": "state dir", "ok": False, "detail": exc.message, "fix": exc.hint}]}
    status = _daemon_status(settings)
    detail = f"running (pid {status['pid']})" if status["running"] else "not running (started on demand)"
    report["checks"].append({"name": "daemon", "ok": True, "detail": f"{detail}; socket {status['socket']}", "fix": None})
    if obj.json:
        emit(report)
    else:
        for c in report["checks"]:
            mark = click.style("ok  ", fg="green") if c["ok"] else click.style("FAIL", fg="red")
            click.echo(f"{mark} {c['name']}: {c['detail']}")
            if c.get("fix"):
                click.echo(f"     fix: {c['fix']}")
    raise SystemExit(0 if report["ok"] else 1)


async def _doctor(svc: Any, provider: str | None) -> dict[str, Any]:
    try:
        return dict(await svc.doctor(provider))
    finally:
        await svc.close()


@click.command()
@json_option
@click.pass_obj
def serve(obj: Ctx) -> None:
    """Run the hutch daemon in the foreground (the CLI and SDK start it on demand).

    With --json, one line {"serving": true, ...} is printed once it accepts connections.
    """
    from hutch.server.daemon import serve as run_server

    settings = Settings.load(**obj.settings_flags)

    def announce() -> None:
        emit({"serving": True, "pid": os.getpid(), "socket": str(settings.socket_path), "home": str(settings.home)})
        sys.stdout.flush()

    raise SystemExit(run_server(settings, announce if obj.json else None))


@click.group()
def daemon() -> None:
    """Manage the local daemon that keeps sandboxes alive between commands."""


@daemon.command()
@json_option
@click.pass_obj
def status(obj: Ctx) -> None:
    """Is the daemon running? (exit 1 when not)"""
    st = _daemon_status(Settings.load(**obj.settings_flags))
    if obj.json:
        emit(st)
    else:
        click.echo(f"running (pid {st['pid']}) on {st['socket']}" if st["running"] else "not running")
    raise SystemExit(0 if st["running"] else 1)


@daemon.command()
@json_option
@click.pass_obj
def start(obj: Ctx) -> None:
    """Start the daemon in the background (no-op when it runs)."""
    settings = Settings.load(**obj.settings_flags)
    ensure_daemon(settings)
    st = _daemon_status(settings)
    emit(st) if obj.json else click.echo(f"running (pid {st['pid']})")


@daemon.command()
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait before SIGKILL.")
@json_option
@click.pass_obj
def stop(obj: Ctx, timeout: float) -> None:
    """Stop the daemon. Sandboxes keep running; the next command re-adopts them."""
    settings = Settings.load(**obj.settings_flags)
    pid = daemon_pid(settings)
    if not socket_answers(settings.socket_path) and pid is None:
        emit({"stopped": True, "was_running": False}) if obj.json else click.echo("not running")
        return
    try:
        obj.client.shutdown()
    except HutchError:
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while socket_answers(settings.socket_path) or (pid and daemon_pid(settings) == pid):
        if time.monotonic() > deadline:
            if pid:
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    emit({"stopped": True, "was_running": True, "pid": pid}) if obj.json else click.echo(f"stopped (pid {pid})")


@daemon.command()
@click.option("--lines", "-n", default=50, show_default=True, help="How many lines from the end.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
@json_option
@click.pass_obj
def logs(obj: Ctx, lines: int, follow: bool) -> None:
    """Print the daemon's log."""
    settings = Settings.load(**obj.settings_flags)
    if not settings.log_path.exists():
        raise UnavailableError(f"no daemon log at {settings.log_path}", hint="the daemon has not run with this HUTCH_HOME")
    text = settings.log_path.read_text(errors="replace").splitlines()[-lines:] if lines else []
    if obj.json:
        emit({"path": str(settings.log_path), "lines": text})
        return
    for line in text:
        click.echo(line)
    if follow:
        with open(settings.log_path, errors="replace") as f:
            f.seek(0, os.SEEK_END)
            while True:
                line = f.readline()
                if line:
                    click.echo(line, nl=False)
                else:
                    time.sleep(0.2)
