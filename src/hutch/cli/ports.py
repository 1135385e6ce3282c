"""hutch expose / unexpose: open a server listening inside a sandbox to the outside."""

from __future__ import annotations

import click

from hutch.cli.common import Ctx, SandboxCommand, emit, json_option

PORT = click.IntRange(1, 65535)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("port", type=PORT)
@click.option(
    "--public", is_flag=True, help="Anyone with the URL may open it (default: private, the URL carries a signed token)."
)
@json_option
@click.pass_obj
def expose(obj: Ctx, sandbox: str, port: int, public: bool) -> None:
    """Open PORT of SANDBOX (a server listening inside it) and print its URL.

    \b
    On the local daemon: a loopback URL on a port of its own (http://127.0.0.1:N/).
    On a gateway: https://HOST/p/SANDBOX/PORT/, and https://PORT-SANDBOX.DOMAIN/ where
    hutch serve --preview-domain names a wildcard DNS name.
    A private URL opens as printed (it carries a signed token); without it the port wants
    the owner's credentials. HTTP and WebSocket both work. Closed by hutch unexpose and
    when the sandbox is destroyed. e.g.:
      hutch exec -d SBX -- python3 -m http.server 8000; hutch expose SBX 8000
    """
    r = obj.client.expose(sandbox, port, public)
    if obj.json:
        emit({"sandbox": r["sandbox"], "port": r["port"], "url": r["url"], "public": r["public"], "urls": r["urls"]})
        return
    click.echo(r["url"])
    for other in r["urls"][1:]:
        click.echo(f"also: {other}", err=True)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("port", type=PORT)
@json_option
@click.pass_obj
def unexpose(obj: Ctx, sandbox: str, port: int) -> None:
    """Close PORT of SANDBOX to the outside (its URLs stop working; nothing inside changes)."""
    r = obj.client.unexpose(sandbox, port)
    if obj.json:
        emit(r)
        return
    click.echo(f"closed port {port} of {r['sandbox']}" if r["closed"] else f"port {port} of {r['sandbox']} was not exposed")
