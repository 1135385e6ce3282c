"""hutch image commit: images made from sandboxes (docs/images.md, "Templates: commit and build")."""

from __future__ import annotations

import click

from hutch.cli.common import Ctx, emit, human_bytes, json_option


@click.command("commit")
@click.argument("sandbox")
@click.argument("name")
@click.option("--no-pause", is_flag=True, help="Do not freeze the sandbox while its writable root is read.")
@json_option
@click.pass_obj
def commit(obj: Ctx, sandbox: str, name: str, no_pause: bool) -> None:
    """Store a sandbox's writable root as a new layer on its image, as the image NAME[:TAG].

    What the sandbox wrote, changed and deleted outside /workspace becomes one layer (deletions
    as OCI whiteouts, owners as the image sees them); the new image's config is its image's.
    The sandbox is frozen while its root is read, then runs on.
    """
    done = obj.client.image_commit(sandbox, name, pause=not no_pause)
    if obj.json:
        emit(done)
        return
    for note in done["notes"]:
        click.echo(f"hutch: {note}", err=True)
    image, layer = done["image"], done["layer"]
    names = ", ".join(image["names"]) or "(no name)"
    click.echo(f"committed {names}: a layer of {layer['entries']} entries, {human_bytes(layer['size'])}", err=True)
    click.echo(image["id"])
