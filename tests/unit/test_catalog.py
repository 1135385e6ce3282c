"""hutch catalog: every command path and every option of click's own tree, as JSON."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest

from hutch.cli import cli, main
from hutch.cli.catalog import build_catalog, subcommands


def tree(group: click.Group) -> dict[str, click.Command]:
    """'daemon stop' -> command, for every command below ``group`` (click's own view)."""
    out: dict[str, click.Command] = {}

    def visit(command: click.Command, path: tuple[str, ...]) -> None:
        if path:
            out[" ".join(path)] = command
        if isinstance(command, click.Group):
            for name, sub in subcommands(command):
                visit(sub, (*path, name))

    visit(group, ())
    return out


def flags(command: click.Command) -> set[str]:
    return {f for p in command.params if isinstance(p, click.Option) for f in (*p.opts, *p.secondary_opts)}


def catalog_problems(group: click.Group, catalog: dict[str, Any]) -> list[str]:
    """Where ``catalog`` and click's tree disagree; empty when the catalog is complete."""
    problems = []
    entries = {c["name"]: c for c in catalog["commands"]}
    commands = tree(group)
    for name in sorted(set(commands) ^ set(entries)):
        problems.append(f"{name!r} is {'missing from' if name in commands else 'invented by'} the catalog")
    for name in sorted(set(commands) & set(entries)):
        listed = {f for o in entries[name]["options"] for f in o["flags"]}
        if listed != flags(commands[name]):
            problems.append(f"{name!r}: catalog options {sorted(listed)} != click's {sorted(flags(commands[name]))}")
        args = [a["name"] for a in entries[name]["arguments"]]
        real = [p.human_readable_name for p in commands[name].params if isinstance(p, click.Argument)]
        if args != real:
            problems.append(f"{name!r}: catalog arguments {args} != click's {real}")
    if {f for o in catalog["global_options"] for f in o["flags"]} != flags(group):
        problems.append("global options differ")
    return problems


def run_catalog(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["catalog", *args]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_catalog_covers_every_command_and_option(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    doc = run_catalog(capsys, *args)
    assert doc["catalog_version"] == 1
    assert catalog_problems(cli, doc) == []
    names = {c["name"] for c in doc["commands"]}
    assert {"run", "exec", "daemon", "daemon stop", "mcp", "skill install", "skill show", "catalog"} <= names


def test_catalog_entries_have_the_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_catalog(capsys)
    for c in doc["commands"]:
        assert {"name", "help", "options", "arguments"} <= set(c), c["name"]
        assert c["help"], f"{c['name']} has no help"
        for o in c["options"]:
            assert {"name", "type", "default", "help"} <= set(o), (c["name"], o)
            assert o["name"].startswith("-")
    stop = next(c for c in doc["commands"] if c["name"] == "daemon stop")
    timeout = next(o for o in stop["options"] if o["name"] == "--timeout")
    assert (timeout["type"], timeout["default"]) == ("duration", "10s")  # the option grammar: DURATION
    exec_ = next(c for c in doc["commands"] if c["name"] == "exec")
    assert [(a["name"], a["nargs"]) for a in exec_["arguments"]] == [("SANDBOX", 1), ("COMMAND", -1)]
    env = next(o for o in exec_["options"] if o["name"] == "--env")
    assert env["flags"] == ["--env", "-e"] and env["multiple"] and env["default"] == []
    session = next(o for o in exec_["options"] if o["name"] == "--session-id")  # documented, no longer hidden
    assert not session.get("hidden") and "alias" in session["help"]
    for name in ("get", "destroy", "push", "pull", "fork", "snapshot save", "write"):
        command = next(c for c in doc["commands"] if c["name"] == name)
        assert any(o["name"] == "--session-id" for o in command["options"]), name
    daemon = next(c for c in doc["commands"] if c["name"] == "daemon")
    assert daemon["subcommands"] == ["logs", "start", "status", "stop"]
    home = next(o for o in doc["global_options"] if o["name"] == "--home")
    assert home["envvar"] == "HUTCH_HOME" and home["default"] is None


def test_catalog_is_plain_json_for_every_default() -> None:
    text = json.dumps(build_catalog(cli))  # raises on anything JSON cannot carry
    assert "Sentinel" not in text and "<function" not in text


# -- the comparison itself can fail ------------------------------------------------------


def _small() -> click.Group:
    @click.group()
    @click.option("--home")
    def root(home: str | None) -> None: ...

    @root.group()
    def daemon() -> None: ...

    @daemon.command()
    @click.option("--timeout", type=float, default=10.0)
    @click.argument("name")
    def stop(timeout: float, name: str) -> None: ...

    return root


def test_the_comparison_catches_a_missing_command_and_option() -> None:
    root = _small()
    good = build_catalog(root)
    assert catalog_problems(root, good) == []
    assert [c["name"] for c in good["commands"]] == ["daemon", "daemon stop"]

    @root.command()
    def extra() -> None: ...

    root.commands["daemon"].commands["stop"].params.append(click.Option(["--force"], is_flag=True))  # type: ignore[attr-defined]
    assert catalog_problems(root, good) == [
        "'extra' is missing from the catalog",
        "'daemon stop': catalog options ['--timeout'] != click's ['--force', '--timeout']",
    ]
