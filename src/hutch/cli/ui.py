"""hutch ui: a one-time login link to the dashboard."""

from __future__ import annotations

import time

import click

from hutch.cli.common import Ctx, emit, json_option


@click.command("ui")
@click.option("--open", "open_", is_flag=True, help="Also open the link in this machine's browser, when it has one.")
@json_option
@click.pass_obj
def ui(obj: Ctx, open_: bool) -> None:
    """Print a one-time link that logs a browser into the dashboard.

    Against the local daemon the link opens a listener of the daemon on 127.0.0.1 (the
    daemon itself listens on a unix socket only); through a gateway (HUTCH_HOST) it is
    the gateway's own address, logged in as your key. The link works once, for 5 minutes;
    the browser then holds a session cookie (12 hours)."""
    link = obj.client.ui_link()
    if obj.json:
        emit(link)
    else:
        click.echo(link["url"])
        until = time.strftime("%H:%M:%S", time.localtime(link["expires_at"]))
        click.echo(f"open it in a browser: it logs in once, until {until}", err=True)
    if open_:
        import webbrowser

        if not webbrowser.open(link["url"]):
            click.echo("no browser found on this machine: open the link yourself", err=True)
