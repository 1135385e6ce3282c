"""The image config options of ``hutch image import`` and ``hutch image build``: ``--cmd``,
``--entrypoint`` (a JSON array, or words split as a POSIX shell would) and ``--user``; import
also takes ``--env`` and ``--workdir`` (build has them as steps)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hutch.cli.common import usage_error

if TYPE_CHECKING:
    from hutch import wire

F = TypeVar("F", bound=Callable[..., Any])
ARGV_HELP = 'a JSON array (\'["python3", "-m", "http.server"]\') or words split as a shell would (\'python3 -m http.server\')'


def argv(value: str | None, flag: str) -> list[str] | None:
    """``--cmd``/``--entrypoint``: None when not given; ``""`` or ``[]`` clears the image's."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("["):
        try:
            got = json.loads(text)
        except ValueError as exc:
            usage_error(f"{flag} {value!r} is not a JSON array ({exc})", f"give {ARGV_HELP}")
        if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
            usage_error(f"{flag} {value!r} is not an array of strings", f"give {ARGV_HELP}")
        return got
    try:
        return shlex.split(text)
    except ValueError as exc:
        usage_error(f"{flag} {value!r}: {exc}", f"give {ARGV_HELP}")


def config_options(f: F) -> F:
    """``--cmd``, ``--entrypoint``, ``--user`` (the image's CMD, ENTRYPOINT and USER)."""
    f = click.option("--user", "user", metavar="USER", help="The image's user (NAME, UID, NAME:GROUP or UID:GID).")(f)
    f = click.option("--entrypoint", metavar="CMD", help=f"The image's entrypoint: {ARGV_HELP}.")(f)
    return click.option("--cmd", metavar="CMD", help=f"The image's command (what run with no command runs): {ARGV_HELP}.")(f)


def changes(
    cmd: str | None, entrypoint: str | None, user: str | None, env: tuple[str, ...] = (), workdir: str | None = None
) -> wire.CommitChanges:
    """What the options change in the image's config."""
    out: wire.CommitChanges = {}
    for pair in env:
        if "=" not in pair or not pair.partition("=")[0]:
            usage_error(f"invalid --env {pair!r}", "use --env NAME=VALUE")
    if env:
        out["env"] = list(env)
    if workdir is not None:
        if not workdir.startswith("/"):
            usage_error(f"--workdir {workdir!r} is relative", "give an absolute path inside the image, e.g. /app")
        out["workdir"] = workdir
    if user is not None:
        if not user.strip():
            usage_error("--user is empty", "give NAME, UID, NAME:GROUP or UID:GID")
        out["user"] = user
    if (c := argv(cmd, "--cmd")) is not None:
        out["cmd"] = c
    if (e := argv(entrypoint, "--entrypoint")) is not None:
        out["entrypoint"] = e
    return out
