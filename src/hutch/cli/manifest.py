"""hutch manifest show: a manifest file merged with the defaults, or a live sandbox's."""

from __future__ import annotations

import os
import stat

import click

from hutch.cli.common import Ctx, emit, json_option


@click.group()
def manifest() -> None:
    """Sandbox manifests: TOML files declaring what hutch create takes (docs/manifest.md).

    hutch create|run|warmup --manifest FILE uses one; flags given beside it win.
    """


def _is_file(source: str) -> bool:
    try:
        return not stat.S_ISDIR(os.stat(source).st_mode)
    except OSError:
        return False


@manifest.command("show")
@click.argument("source", metavar="FILE|SANDBOX")
@json_option
@click.pass_obj
def show(obj: Ctx, source: str) -> None:
    """Print the manifest of FILE (checked, merged with your defaults) or of SANDBOX (what it
    was made from), as TOML: hutch create --manifest <(hutch manifest show SBX) makes it again.

    Secrets are shown as the references they are read from, never values; environment
    values hutch does not keep become pass_env names (read from your environment at create).
    """
    from hutch.manifest.load import load
    from hutch.manifest.show import REDACTED, dumps, manifest_of
    from hutch.wire.build import sandbox_spec

    if _is_file(source):
        loaded = load(source)
        args = dict(loaded.args)
        args["env"] = dict.fromkeys(loaded.pass_env, REDACTED) | args.get("env", {})
        doc = manifest_of(sandbox_spec(obj.settings, **args))
        title = f"hutch manifest of {source}, merged with the defaults"
    else:
        rec = obj.client.get(source)
        doc = manifest_of(rec["spec"])
        title = f"hutch manifest of sandbox {rec['id']}: hutch create --manifest FILE makes it again"
    if obj.json:
        emit(doc)
        return
    note = "\npass_env: values hutch does not keep, read from the environment of hutch create" if "pass_env" in doc else ""
    click.echo(dumps(doc, title + note), nl=False)
