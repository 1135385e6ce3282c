"""doctor, serve, daemon status|start|stop|logs."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from hutch.cli.common import DURATION, Ctx, count, emit, json_option
from hutch.client import Client
from hutch.client.launcher import ensure_daemon
from hutch.config import Settings
from hutch.errors import HutchError, NotFoundError, UnavailableError
from hutch.server.home import daemon_pid, socket_answers


def _local(obj: Ctx) -> Settings:
    """The daemon commands manage the local daemon, whatever HUTCH_HOST says."""
    return Settings.load(**obj.settings_flags).replace(host="")


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
    if settings.host:  # a remote daemon: its checks, from its host
        report = _remote_doctor(obj, settings, provider)
    else:
        try:
            report = asyncio.run(_doctor(Service(settings), provider))
        except HutchError as exc:
            report = {"ok": False, "checks": [{"name": "state dir", "ok": False, "detail": exc.message, "fix": exc.hint}]}
        status = _daemon_status(settings)
        detail = f"running (pid {status['pid']})" if status["running"] else "not running (started on demand)"
        report["checks"].append({"name": "daemon", "ok": True, "detail": f"{detail}; socket {status['socket']}", "fix": None})
        if status["running"]:
            report["checks"] += _credential_checks(obj)
            report["checks"] += _pool_checks(obj)
        report["ok"] = all(c["ok"] for c in report["checks"])
    if obj.json:
        emit(report)
    else:
        for c in report["checks"]:
            mark = click.style("ok  ", fg="green") if c["ok"] else click.style("FAIL", fg="red")
            click.echo(f"{mark} {c['name']}: {c['detail']}")
            if c.get("fix"):
                click.echo(f"     fix: {c['fix']}")
    raise SystemExit(0 if report["ok"] else 1)


def _remote_doctor(obj: Ctx, settings: Settings, provider: str | None) -> dict[str, Any]:
    where = f"remote {obj.client.endpoint.label}" + (f" (profile {settings.profile})" if settings.profile else "")
    try:
        health = obj.client.health()
        report = dict(obj.client.json("GET", "/v1/doctor", params={"provider": provider}))
    except HutchError as exc:
        check = {"name": "daemon", "ok": False, "detail": f"{where}: {exc.kind}: {exc.message}", "fix": exc.hint}
        return {"ok": False, "checks": [check]}
    detail = f"{where}: running (pid {health.get('pid')}, version {health.get('version')})"
    report["checks"].append({"name": "daemon", "ok": True, "detail": detail, "fix": None})
    return report


def _credential_checks(obj: Ctx) -> list[dict[str, Any]]:
    """Which credential each account the daemon works for has in its memory (the request
    brings this shell's own, which counts)."""
    try:
        return list(obj.client.json("GET", "/v1/credentials")["checks"])
    except NotFoundError:
        return [{"name": "credentials", "ok": True, "detail": "this daemon predates credential reports", "fix": None}]
    except HutchError as exc:
        return [{"name": "credentials", "ok": False, "detail": f"the daemon did not say: {exc.message}", "fix": exc.hint}]


def _pool_checks(obj: Ctx) -> list[dict[str, Any]]:
    """The daemon's warm pool: its members and their memory (this process has none)."""
    from hutch.service.poolsizes import pool_check

    try:
        check = pool_check(dict(obj.client.pool_status()))
    except NotFoundError:
        return []  # a daemon that predates the pool
    except HutchError as exc:
        return [{"name": "pool", "ok": False, "detail": f"the daemon did not say: {exc.message}", "fix": exc.hint}]
    return [] if check is None else [check.to_dict()]


async def _doctor(svc: Any, provider: str | None) -> dict[str, Any]:
    try:
        return dict(await svc.doctor(provider))
    finally:
        await svc.close()


@click.command()
@click.option("--listen", metavar="HOST:PORT", help="Also serve on TCP (token required; port 0 picks one; env HUTCH_LISTEN).")
@click.option("--token-file", metavar="PATH", help="The bearer token TCP clients must send (env HUTCH_API_TOKEN_FILE).")
@click.option("--tls-cert", metavar="PEM", help="TLS certificate for --listen (required off loopback).")
@click.option("--tls-key", metavar="PEM", help="TLS private key for --listen.")
@click.option("--client-ca", metavar="PEM", help="Ask for client certificates from this CA (default: hutch gateway init's).")
@click.option("--require-client-cert", is_flag=True, default=None, help="Refuse TCP requests without a client certificate.")
@click.option("--public-url", metavar="URL", help="The gateway's URL as clients see it, for preview URLs (default: --listen's).")
@click.option(
    "--preview-domain", metavar="DOMAIN", help="A wildcard DNS name (*.DOMAIN) to the gateway: https://PORT-SANDBOX.DOMAIN/."
)
@click.option(
    "--credentials-file",
    metavar="PATH",
    help="Owner-only TOML file of provider tokens for an unattended daemon (env HUTCH_CREDENTIALS_FILE).",
)
@click.option(
    "--cluster", metavar="RAY_ADDRESS", help="Place sandboxes on the nodes of this Ray cluster (HOST:PORT of its head)."
)
@click.option(
    "--placement",
    type=click.Choice(["spread", "pack"]),
    help="With --cluster: the node with the most room, or the fullest that fits.",
)
@json_option
@click.pass_obj
def serve(
    obj: Ctx,
    listen: str | None,
    token_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    require_client_cert: bool | None,
    public_url: str | None,
    preview_domain: str | None,
    credentials_file: str | None,
    cluster: str | None,
    placement: str | None,
) -> None:
    """Run the hutch daemon in the foreground (the CLI and SDK start it on demand).

    The owner-only unix socket is always served; --listen adds a TCP listener that wants
    the token of --token-file on every request (never pass a token on the command line),
    and TLS (--tls-cert/--tls-key) on any address but loopback. After hutch gateway init,
    --listen uses its server certificate and takes client certificates from its CA (a
    certificate acts as the API key it is bound to; --require-client-cert: nothing else does).
    Provider tokens come with each command from the caller's environment and are kept in
    memory only; --credentials-file (mode 0600, refused otherwise) lets the daemon expire
    and clean up after a restart before any caller brings them again.
    With --cluster the daemon is a cluster's front door and only Ray driver: sandboxes are
    placed on the nodes of that Ray cluster (docs/cluster.md), and it keeps no warm pool.
    With --json, one line {"serving": true, ...} is printed once it accepts connections.
    """
    from hutch.server.daemon import serve as run_server

    flags = {"listen": listen, "api_token_file": token_file, "tls_cert": tls_cert, "tls_key": tls_key}
    flags["credentials_file"] = credentials_file
    flags |= {"client_ca": client_ca, "require_client_cert": "true" if require_client_cert else None}
    flags |= {"public_url": public_url, "preview_domain": preview_domain}
    flags |= {"cluster": cluster, "cluster_placement": placement} | ({"pool_size": "0"} if cluster else {})
    settings = Settings.load(**obj.settings_flags, **flags)

    def announce(lst: Any) -> None:
        doc = {"serving": True, "pid": os.getpid(), "socket": str(settings.socket_path), "home": str(settings.home)}
        emit(doc | ({"listen": lst.url} if lst else {}))
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
    st = _daemon_status(_local(obj))
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
    settings = _local(obj)
    ensure_daemon(settings)
    st = _daemon_status(settings)
    emit(st) if obj.json else click.echo(f"running (pid {st['pid']})")


def _running(pid: int) -> bool:
    """Whether the process is still there (a zombie has ended: its parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@daemon.command()
@click.option("--timeout", type=DURATION, default="10s", show_default=True, help="How long to wait before SIGKILL.")
@json_option
@click.pass_obj
def stop(obj: Ctx, timeout: float) -> None:
    """Stop the daemon. Sandboxes keep running; the next command re-adopts them."""
    settings = _local(obj)
    pid = daemon_pid(settings)
    if not socket_answers(settings.socket_path) and pid is None:
        emit({"stopped": True, "was_running": False}) if obj.json else click.echo("not running")
        return
    try:
        Client(settings, autostart=False).shutdown()
    except HutchError:
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while socket_answers(settings.socket_path) or (pid and (daemon_pid(settings) == pid or _running(pid))):
        if time.monotonic() > deadline:
            if pid:
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    emit({"stopped": True, "was_running": True, "pid": pid}) if obj.json else click.echo(f"stopped (pid {pid})")


@daemon.command()
@click.option(
    "--lines", "-n", type=count(0, 100000), metavar="N", default=50, show_default=True, help="How many lines from the end."
)
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
