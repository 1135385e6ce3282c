"""hutch skill install|show: the agent skill, rendered from the package's templates and the live CLI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hutch._version import __version__
from hutch.cli.catalog import build_catalog
from hutch.cli.common import Ctx, emit, json_option
from hutch.errors import KINDS, ConflictError, InvalidError, UnavailableError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

TARGETS = ("claude", "codex")

# What an agent should do about each error kind; a test keeps it in step with KINDS.
ADVICE = {
    "invalid": "The input is wrong (a bad size, name, mount, path or option). Fix it as the message says; "
    "retrying unchanged fails again.",
    "not_found": "No such sandbox or file. `hutch list --all` shows sandboxes; create a new one if yours is gone.",
    "conflict": "The name is taken by a live sandbox: reuse that sandbox, choose another `--name`, or destroy the old one.",
    "unauthorized": "A remote hutch refused the credentials. Ask the user for access; do not guess keys.",
    "capacity": "Out of space or a limit was reached (disk, tmpfs). Destroy sandboxes you no longer need "
    "(`hutch list`, `hutch destroy`), write less, or ask the user to free disk.",
    "unavailable": "hutch cannot run sandboxes or reach its daemon. Run `hutch doctor` and follow its "
    "`fix:` lines; `hutch daemon logs` shows the daemon's side.",
    "timeout": "hutch itself gave up waiting (not your command's `--timeout`, which is `status: timed_out`). "
    "Retry once; if it persists, run `hutch doctor`.",
    "policy": "A policy forbids this action. Do not work around it: ask the user.",
    "permission_denied": "The sandbox's user may not touch that path (the root is read-only). Use `/workspace`, "
    "`/tmp` or the home directory, or a read-write mount.",
    "approval_required": "The sandbox's policy needs a human's approval for this action. Tell the user the "
    "`approval_id` (they run `hutch approve ID`), wait with `hutch approvals`, then retry with `--approval ID`. "
    "Never try to approve it yourself.",
    "rate_limited": "The gateway's rate limit for your key was reached. hutch's own client already waited and "
    "retried; slow down (fewer calls in a loop, batch work into one `hutch run`) and retry after the `Retry-After`.",
    "internal": "A bug in hutch. Retry once; then report the message with the end of `hutch daemon logs`.",
}


def _exit_codes(kind: str) -> str:
    if kind == "invalid":
        return "2"
    return "124 / 1" if kind == "timeout" else "125 / 1"


def error_table() -> str:
    rows = ["| kind | exit code (exec, run / others) | what to do |", "|---|---|---|"]
    for kind in KINDS:
        rows.append(f"| `{kind}` | {_exit_codes(kind)} | {ADVICE.get(kind, 'Read the message and follow the hint.')} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def command_table(catalog: dict[str, Any]) -> str:
    rows = ["| command | what it does |", "|---|---|"]
    for c in catalog["commands"]:
        rows.append(f"| `{c['usage']}` | {_cell(c['short_help'])} |")
    return "\n".join(rows)


def _option_rows(options: list[dict[str, Any]]) -> list[str]:
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for o in options:
        default = "" if o["default"] in (None, False, []) else f"`{o['default']}`"
        flags = ", ".join(f"`{f}`" for f in o["flags"])
        rows.append(f"| {flags} | {o['type']} | {default} | {_cell(o['help'])}{' (hidden)' if o.get('hidden') else ''} |")
    return rows


def command_reference(catalog: dict[str, Any]) -> str:
    parts: list[str] = []
    for c in catalog["commands"]:
        parts += [f"## hutch {c['name']}", "", "```", c["usage"], "```", "", c["help"], ""]
        if c["arguments"]:
            args = ", ".join(f"`{a['name']}`{'' if a['required'] else ' (optional)'}" for a in c["arguments"])
            parts += [f"Arguments: {args}.", ""]
        if c["options"]:
            parts += [*_option_rows(c["options"]), ""]
        if c["subcommands"]:
            parts += ["Subcommands: " + ", ".join(f"`hutch {c['name']} {s}`" for s in c["subcommands"]) + ".", ""]
    return "\n".join(parts).rstrip()


def _templates(node: Traversable, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in sorted(node.iterdir(), key=lambda t: t.name):
        if item.is_dir():
            out |= _templates(item, f"{prefix}{item.name}/")
        elif item.name.endswith(".md"):
            out[prefix + item.name] = item.read_text()
    return out


def render(root: click.Command) -> dict[str, str]:
    """Every file of the skill, relative path -> text, with the command lists generated from ``root``."""
    from importlib.resources import files  # imported here: the CLI's start-up time is budgeted

    catalog = build_catalog(root)
    values = {
        "version": __version__,
        "commands": command_table(catalog),
        "reference": command_reference(catalog),
        "errors": error_table(),
        "global_options": ", ".join(f"`{o['name']}`" for o in catalog["global_options"]),
    }
    out = {}
    for name, text in _templates(files("hutch") / "templates" / "skill").items():
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        out[name] = text
    return out


def destinations(target: str) -> list[tuple[str, Path]]:
    """Where each agent looks for skills: ~/.claude/skills/hutch, ~/.codex/skills/hutch."""
    homes = {
        "claude": Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude"),
        "codex": Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex"),
    }
    return [(t, homes[t] / "skills" / "hutch") for t in (TARGETS if target == "all" else (target,))]


def _check(dest: Path, force: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise ConflictError(f"{dest} exists and is not a directory", hint="remove it, or use --dir")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise ConflictError(
            f"{dest} already exists",
            hint="pass --force to replace hutch's SKILL.md and references/ there (other files are kept)",
        )


def write_skill(dest: Path, rendered: dict[str, str]) -> list[str]:
    """Write the skill's files into ``dest``, each replaced atomically; nothing else is touched."""
    import tempfile

    written = []
    for rel, text in rendered.items():
        path = dest / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError as exc:
            raise UnavailableError(f"cannot write {path}: {exc.strerror}", hint="check the permissions, or use --dir") from exc
        written.append(str(path))
    return written


@click.group()
def skill() -> None:
    """Install or print the agent skill that teaches coding agents to use hutch."""


@skill.command()
@click.option(
    "--target",
    type=click.Choice([*TARGETS, "all"]),
    default="all",
    show_default=True,
    help="Which agent: claude (~/.claude/skills/hutch), codex (~/.codex/skills/hutch) or all.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Install into this directory instead (the skill directory itself).",
)
@click.option("--force", is_flag=True, help="Replace an existing skill's files (unrelated files in the directory are kept).")
@json_option
@click.pass_context
def install(ctx: click.Context, target: str, directory: str | None, force: bool) -> None:
    """Write SKILL.md and references/ where coding agents look for skills."""
    obj = ctx.ensure_object(Ctx)
    if directory and ctx.get_parameter_source("target") is not click.core.ParameterSource.DEFAULT:
        raise InvalidError("give --target or --dir, not both", hint="--dir is the skill directory itself")
    dests = [("dir", Path(directory).expanduser().absolute())] if directory else destinations(target)
    for _, dest in dests:
        _check(dest, force)
    rendered = render(ctx.find_root().command)
    done = []
    for name, dest in dests:
        existed = dest.is_dir() and any(dest.iterdir())
        done.append({"target": name, "dir": str(dest), "files": write_skill(dest, rendered), "replaced": existed})
    if obj.json:
        emit({"installed": done})
        return
    for d in done:
        click.echo(f"{'updated' if d['replaced'] else 'installed'} the hutch skill for {d['target']}: {d['dir']}")


@skill.command()
@click.option(
    "--file", "name", default="SKILL.md", show_default=True, help="Which file of the skill, e.g. references/commands.md."
)
@json_option
@click.pass_context
def show(ctx: click.Context, name: str) -> None:
    """Print the skill (SKILL.md, or another of its files), as it would be installed."""
    rendered = render(ctx.find_root().command)
    if ctx.ensure_object(Ctx).json:
        emit({"name": "hutch", "files": rendered})
        return
    if name not in rendered:
        raise InvalidError(f"the skill has no file {name!r}", hint="one of: " + ", ".join(rendered))
    click.echo(rendered[name], nl=False)
