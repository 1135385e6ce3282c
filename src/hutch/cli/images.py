"""hutch image: pull, import, list, inspect, rm, prune, commit (docs/images.md).

A pull or an import shows a progress bar on a terminal (rich, on stderr) and prints the image's
id; with ``--json`` it prints one JSON object per line (NDJSON): the daemon's frames, ``done``
last (an error is the usual ``{"error": ...}`` line, exit code of its kind).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from hutch.cli.build import build
from hutch.cli.common import Ctx, emit, human_bytes, json_option, table
from hutch.cli.imageconfig import changes, config_options
from hutch.cli.templates import commit

if TYPE_CHECKING:
    from hutch import wire


def _follow(obj: Ctx, frames: Iterator[Any], what: str) -> dict[str, Any]:
    from hutch.client.images import follow

    if obj.json:
        return follow(frames, lambda f: emit(f, line=True) if f.get("type") != "error" else None)
    if not sys.stderr.isatty():
        return follow(frames)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True) as bar:
        task = bar.add_task(what, total=None)
        done: dict[str, int] = {}

        def show(frame: dict[str, Any]) -> None:
            kind = frame.get("type")
            if kind == "resolved":
                bar.update(task, total=frame["missing"] or None, description=f"{what} ({frame['layers']} layers)")
            elif kind == "progress":
                done[frame["digest"]] = frame["bytes"]
                bar.update(task, completed=sum(done.values()))
            elif kind == "layer" and frame["status"] == "downloaded":
                done[frame["digest"]] = frame["size"]
                bar.update(task, completed=sum(done.values()))
            elif kind == "layer" and frame["status"] == "unpacked":
                bar.update(task, description=f"{what}: unpacked {frame['digest'][7:19]}")
            elif kind == "received":
                bar.update(task, completed=frame["bytes"], description=f"{what}: uploaded")

        return follow(frames, show)


def _said(image: wire.ImageRecord, verb: str, started: float, transferred: int | None = None) -> None:
    names = ", ".join(image["names"]) or "(no name)"
    moved = f", {human_bytes(transferred)} transferred" if transferred is not None else ""
    click.echo(f"{verb} {names}: {image['id'][7:19]} ({image['platform']}{moved}, {time.monotonic() - started:.1f}s)", err=True)
    click.echo(image["id"])


@click.group()
def image() -> None:
    """Images: read-only root filesystems sandboxes start from (--image REF); see docs/images.md."""


@image.command("pull")
@click.argument("ref")
@click.option("--insecure", is_flag=True, help="Allow plain http to this registry (registries on localhost need not).")
@click.option("--platform", metavar="OS/ARCH", help="Only this machine's own platform can run (default: it).")
@json_option
@click.pass_obj
def pull(obj: Ctx, ref: str, insecure: bool, platform: str | None) -> None:
    """Pull REF from its registry (python:3.12-slim, localhost:5000/team/img:tag, NAME@sha256:...).

    A login comes from HUTCH_REGISTRY_USER and HUTCH_REGISTRY_PASSWORD, or from the docker
    config file (~/.docker/config.json, or $DOCKER_CONFIG); never from the command line.
    Layers already stored are not downloaded again."""
    started = time.monotonic()
    done = _follow(obj, obj.client.image_pull(ref, insecure=insecure, platform=platform), f"pull {ref}")
    if not obj.json:
        _said(done["image"], "pulled", started, done["transferred"])


@image.command("import")
@click.argument("source")
@click.argument("name", required=False)
@click.option("--env", "-e", multiple=True, metavar="K=V", help="Set a variable in the image's config (repeatable).")
@click.option("--workdir", metavar="DIR", help="The image's working directory (absolute).")
@config_options
@json_option
@click.pass_obj
def import_(
    obj: Ctx,
    source: str,
    name: str | None,
    env: tuple[str, ...],
    workdir: str | None,
    cmd: str | None,
    entrypoint: str | None,
    user: str | None,
) -> None:
    """Import SOURCE as an image named NAME[:TAG] (default: the names the archive carries).

    --env, --workdir, --user, --cmd and --entrypoint set the image's config (what a root
    filesystem has none of; for an archive they replace its own): sandboxes of the image
    start with them as their defaults.

    \b
    SOURCE is read here and uploaded to the daemon:
      oci-archive:PATH[:REF]   an OCI image layout in a tar file
      oci:DIR[:REF]            an OCI image layout directory
      docker-archive:PATH      what docker save writes
      rootfs:PATH              a root filesystem: a directory, or a tar (plain, gzip or zstd)
      -                        a root filesystem tar on standard input:
                               mmdebstrap --variant=minbase bookworm - | hutch image import - debian:bookworm
    """
    edit = changes(cmd, entrypoint, user, env, workdir)
    started = time.monotonic()
    done = _follow(obj, obj.client.image_import(source, name, edit or None), f"import {source}")
    if not obj.json:
        _said(done["image"], "imported", started)


@image.command("list")
@json_option
@click.pass_obj
def list_(obj: Ctx) -> None:
    """List stored images (newest first)."""
    images = obj.client.images()
    if obj.json:
        emit(images)
        return
    rows = [
        [
            i["id"][7:19],
            ", ".join(i["names"]) or "-",
            i["platform"],
            human_bytes(i["size"]),
            str(len(i["layers"])),
            str(len(i["sandboxes"])),
        ]
        for i in images
    ]
    table(rows, ["id", "names", "platform", "size", "layers", "sandboxes"])


@image.command("inspect")
@click.argument("ref")
@json_option
@click.pass_obj
def inspect(obj: Ctx, ref: str) -> None:
    """Show one image: names, digests, layers, the config sandboxes take as defaults."""
    i = obj.client.image_inspect(ref)
    if obj.json:
        emit(i)
        return
    cfg = i["config"]
    for key, value in (
        ("id", i["id"]),
        ("names", ", ".join(i["names"]) or "-"),
        ("digests", ", ".join(i["digests"]) or "-"),
        ("platform", i["platform"]),
        ("size", human_bytes(i["size"])),
        ("source", i["source"]),
        ("entrypoint", " ".join(cfg["entrypoint"]) or "-"),
        ("cmd", " ".join(cfg["cmd"]) or "-"),
        ("workdir", cfg["workdir"] or "-"),
        ("user", cfg["user"] or "-"),
        ("env", " ".join(cfg["env"]) or "-"),
        ("layers", "\n  ".join(f"{layer['digest']} {human_bytes(layer['size'])}" for layer in i["layers"])),
        ("sandboxes", ", ".join(i["sandboxes"]) or "-"),
    ):
        click.echo(f"{key}: {value}")


@image.command("rm")
@click.argument("ref")
@click.option("--force", is_flag=True, help="Remove it even while live sandboxes use it (its files stay until they are gone).")
@json_option
@click.pass_obj
def rm(obj: Ctx, ref: str, force: bool) -> None:
    """Remove a name (NAME:TAG), or an image with all its names (its id)."""
    r = obj.client.image_rm(ref, force=force)
    if obj.json:
        emit(r)
        return
    gone = f"removed image {r['image'][7:19]}" if r["deleted"] else f"untagged {', '.join(r['untagged'])}"
    click.echo(f"{gone}" + (f", freed {human_bytes(r['freed'])}" if r["freed"] else ""))


@image.command("prune")
@json_option
@click.pass_obj
def prune(obj: Ctx) -> None:
    """Remove the files no image and no live sandbox uses (and interrupted downloads)."""
    r = obj.client.image_prune()
    if obj.json:
        emit(r)
        return
    click.echo(
        f"freed {human_bytes(r['freed'])}: {r['rootfs']} root filesystems, {r['layers']} layers, {r['blobs']} blobs, "
        f"{r['partials']} partial downloads"
    )


image.add_command(commit)
image.add_command(build)
