"""hutch gateway (init, issue, certs, revoke) and hutch login: mutual TLS for a gateway.

``init`` runs on the gateway's host and needs no daemon (it writes the CA and the server
certificate to ``$HUTCH_HOME/gateway``); ``issue``, ``certs`` and ``revoke`` ask the daemon
(the owner over its unix socket, or an admin key through the gateway); ``login`` runs on
the client's machine and writes its config.toml.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from hutch.cli.common import DURATION, Ctx, emit, json_option, table
from hutch.config import Settings

SCOPES = click.Choice(["read", "write", "approve", "metrics", "admin"])


@click.group()
def gateway() -> None:
    """Mutual TLS for hutch serve --listen: a CA, the server's certificate, client certificates."""


@gateway.command("init")
@click.option(
    "--name",
    "names",
    multiple=True,
    required=True,
    metavar="NAME|IP",
    help="A name or address of the server certificate (repeatable).",
)
@click.option("--url", metavar="URL", help="The gateway's URL as clients reach it (default: https://FIRST-NAME:8443).")
@click.option("--days", type=click.IntRange(1, 3650), default=825, show_default=True, help="The server certificate's validity.")
@click.option("--force", is_flag=True, help="Make a new CA too (every certificate it issued stops working).")
@json_option
@click.pass_obj
def gateway_init(obj: Ctx, names: tuple[str, ...], url: str | None, days: int, force: bool) -> None:
    """Make the gateway's CA (once) and its server certificate in $HUTCH_HOME/gateway.

    \b
    hutch serve --listen then uses them (TLS, and client certificates from the CA):
      hutch gateway init --name gw.example.com --name 10.0.0.5 --url https://gw.example.com:8443
      hutch serve --listen 0.0.0.0:8443 [--require-client-cert]
    Running it again keeps the CA (issued certificates stay valid) and makes a new server certificate.
    """
    from hutch import pki

    settings = Settings.load(**obj.settings_flags)
    host = names[0] if ":" not in names[0] else f"[{names[0]}]"
    r = pki.init(pki.GatewayFiles.of(settings.home), list(names), url or f"https://{host}:8443", days=days, force=force)
    if obj.json:
        emit(r)
        return
    click.echo(f"{'made the CA and ' if r['ca_created'] else ''}the server certificate for {', '.join(names)} in {r['dir']}")
    click.echo(f"CA fingerprint (SHA-256): {r['ca_fingerprint']}")
    click.echo("serve with: hutch serve --listen HOST:PORT [--require-client-cert]; issue with: hutch gateway issue NAME")


@gateway.command("issue")
@click.argument("name")
@click.option("--key", "key_ref", metavar="KEY", help="Bind to this API key (id or name); default: a new key named NAME.")
@click.option("--scope", "scopes", multiple=True, type=SCOPES, help="Scopes of the new key (repeatable; default read, write).")
@click.option("--ttl", type=DURATION, help="The certificate's validity (default 90d).")
@click.option(
    "--csr", type=click.Path(dir_okay=False), help="Sign this PEM CSR (its CN must be NAME): the bundle then has no key."
)
@click.option("--url", metavar="URL", help="The gateway's URL in the bundle (default: hutch gateway init's --url).")
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="Write the bundle here (default: ./NAME.hutch.json).")
@json_option
@click.pass_obj
def gateway_issue(
    obj: Ctx,
    name: str,
    key_ref: str | None,
    scopes: tuple[str, ...],
    ttl: float | None,
    csr: str | None,
    url: str | None,
    out: str | None,
) -> None:
    """Issue a client certificate for NAME, bound to an API key, and write its profile bundle.

    The bundle (one owner-only JSON file: the gateway's URL and CA, the certificate and its
    private key) is what the client gives to hutch login. It is a credential: hand it over
    as you would a key.
    """
    import json

    csr_text = Path(csr).read_text() if csr else None
    r = obj.client.issue_certificate(name, key=key_ref, scopes=list(scopes) or None, ttl=ttl, csr=csr_text, url=url)
    path = Path(out or f"{name}.hutch.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(r["bundle"], f, indent=2)
    cert = r["certificate"]
    if obj.json:
        emit({"certificate": cert, "key": r["key"], "bundle": str(path)})
        return
    click.echo(str(path))
    expires = time.strftime("%Y-%m-%d", time.localtime(cert["expires_at"]))
    click.echo(
        f"issued {name} (serial {cert['serial']}, until {expires}) bound to key {r['key']['name']} ({r['key']['id']})", err=True
    )
    click.echo(f"on the client: hutch login {path.name}, then hutch --profile {name} ...", err=True)


@gateway.command("certs")
@json_option
@click.pass_obj
def gateway_certs(obj: Ctx) -> None:
    """List the client certificates this gateway issued."""
    rows = obj.client.certificates()
    if obj.json:
        emit(rows)
        return
    day = "%Y-%m-%d"
    table(
        [
            [r["name"], r["serial"][:16], r["key_id"], r["state"], time.strftime(day, time.localtime(r["expires_at"]))]
            for r in rows
        ],
        ["NAME", "SERIAL", "KEY", "STATE", "EXPIRES"],
    )


@gateway.command("revoke")
@click.argument("ref")
@json_option
@click.pass_obj
def gateway_revoke(obj: Ctx, ref: str) -> None:
    """Revoke the client certificates REF names (a name, serial or fingerprint): refused from the next request."""
    rows = obj.client.revoke_certificate(ref)
    if obj.json:
        emit(rows)
        return
    for r in rows:
        click.echo(f"revoked {r['name']} (serial {r['serial']})")


@click.command()
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--name", metavar="PROFILE", help="The profile's name (default: the bundle's).")
@click.option("--key-file", type=click.Path(dir_okay=False), help="The private key, for a bundle issued for your CSR.")
@click.option("--force", is_flag=True, help="Replace a profile of that name.")
@json_option
@click.pass_obj
def login(obj: Ctx, bundle: str, name: str | None, key_file: str | None, force: bool) -> None:
    """Use a gateway: write BUNDLE (from hutch gateway issue) as [profiles.NAME] of config.toml.

    The CA, certificate and key are kept owner-only under $HUTCH_HOME/profiles/NAME;
    then hutch --profile NAME ... (or HUTCH_PROFILE=NAME) talks to the gateway.
    """
    from hutch.client.profiles import login as write_profile

    r = write_profile(Settings.load(**obj.settings_flags), bundle, name, key_file, force)
    if obj.json:
        emit(r)
        return
    click.echo(f"profile {r['profile']} -> {r['url']} (in {r['config']}); use: hutch --profile {r['profile']} list")
