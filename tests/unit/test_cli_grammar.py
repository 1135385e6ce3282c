"""One option grammar for every command (durations, sizes, counts, filters; docs/cli.md
"Option grammar"), the hint for a forgotten ``--``, and teardown that agrees everywhere.

The first tests walk the real click tree, so a new option that breaks the grammar fails
here; the others run the CLI against a real daemon on the fake provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import pytest
from test_cli import assert_json_error, cli, daemon_home, one_json, sbx  # noqa: F401 - fixtures and helpers

from hutch.cli import cli as root
from hutch.cli.catalog import subcommands
from hutch.cli.common import Duration, Size


def options() -> Iterator[tuple[str, click.Option]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
        for p in command.params:
            if isinstance(p, click.Option):
                yield path, p
        if isinstance(command, click.Group):
            for name, sub in subcommands(command):
                yield from walk(sub, f"{path} {name}".strip())

    yield from walk(root, "")


def visible(name: str) -> list[tuple[str, click.Option]]:
    return [(path, o) for path, o in options() if name in o.opts and not o.hidden]


# -- the grammar, held over the whole command tree ------------------------------------


def test_every_duration_option_is_a_duration() -> None:
    durations = [(path, o) for path, o in options() if any(f.endswith(("-timeout", "--ttl")) for f in o.opts)]
    assert len(durations) >= 10
    for path, o in durations:
        assert isinstance(o.type, Duration), (path, o.opts)
        assert o.type.convert("5m", o, None) == 300.0, (path, o.opts)
        assert o.type.convert("90", o, None) == 90.0, (path, o.opts)  # a bare number is seconds


def test_every_size_option_is_a_size() -> None:
    sizes = [(path, o) for path, o in options() if {"--memory", "--max-output", "--max-bytes"} & set(o.opts)]
    assert {path for path, _ in sizes} >= {"create", "run", "exec", "subagent", "poll", "logs", "mcp"}
    for path, o in sizes:
        assert isinstance(o.type, Size), (path, o.opts)
        assert o.type.convert("1M", o, None) == 1 << 20


def test_limit_is_always_a_count_and_all_is_always_a() -> None:
    for path, o in visible("--limit"):
        assert isinstance(o.type, click.IntRange), path  # poll/logs's byte cap is --max-bytes
    alls = visible("--all")
    assert {path for path, _ in alls} >= {"list", "destroy", "events", "stop"}
    for path, o in alls:
        assert "-a" in o.opts, path


def test_sandbox_is_never_an_option_of_its_own() -> None:
    # the sandbox is the SANDBOX argument (or --session-id); --sandbox survives only as a hidden old spelling
    assert visible("--sandbox") == []
    assert [path for path, _ in visible("--session-id")].count("run") == 1


# -- the grammar at work ----------------------------------------------------------------


def test_exec_timeout_takes_a_duration_like_create_ttl(cli: Any, sbx: str) -> None:  # noqa: F811
    code, out, err = cli("exec", sbx, "--timeout", "5m", "--idle-output-timeout", "90s", "--", "echo", "ok")
    assert (code, out) == (0, "ok\n"), err
    code, runs = cli.json("runs", sbx, "--json")
    assert (runs[-1]["timeout"], runs[-1]["idle_timeout"]) == (300.0, 90.0)
    code, rec = cli.json("create", "--ttl", "5m", "--json")
    try:
        assert code == 0 and rec["spec"]["ttl"] == 300.0
    finally:
        cli("destroy", rec["id"])


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["exec", "SBX", "--timeout", "5x", "--", "true"], "90s, 30m"),
        (["exec", "SBX", "--timeout", "8d", "--", "true"], "at most 7d"),
        (["create", "--memory", "lots"], "512M"),
        (["wait", "run_0", "--timeout", "0"], "positive"),
        (["events", "--all", "--limit", "0"], ""),
        (["poll", "run_0", "--max-bytes", "many"], "512M"),
        (["fork", "SBX", "-n", "33"], ""),
    ],
)
def test_a_value_of_the_wrong_kind_is_a_usage_error_with_a_hint(cli: Any, args: list[str], hint: str) -> None:  # noqa: F811
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert "Invalid value" in err and hint in err
    code, doc = cli.json(args[0], "--json", *args[1:])
    assert code == 2
    assert hint in assert_json_error(doc, "invalid")["hint"]


def test_poll_and_logs_cap_bytes_with_max_bytes_and_keep_the_old_limit(cli: Any, sbx: str) -> None:  # noqa: F811
    code, out, _ = cli("exec", sbx, "-d", "--", "echo", "hello world")
    run_id = out.strip()
    assert cli("wait", run_id)[0] == 0
    code, page = cli.json("poll", run_id, "--max-bytes", "4", "--json")
    assert code == 0 and page["stdout"]["data"] == "hell" and page["stdout"]["next_offset"] == 4
    code, out, err = cli("poll", run_id, "--limit", "4", "--json")
    assert code == 0 and one_json(out)["stdout"]["data"] == "hell"
    assert "--limit is now spelled --max-bytes" in err
    code, out, err = cli("poll", run_id, "--limit", "4", "--max-bytes", "4")
    assert code == 2 and "old spelling" in err
    code, logs = cli.json("logs", sbx, "--max-bytes", "1M", "--json")
    assert code == 0 and any(r["data"] == "hello world\n" for r in logs["records"])


def test_events_takes_a_and_a_count(cli: Any, sbx: str) -> None:  # noqa: F811
    for _ in range(2):  # at least three events, whatever ran before
        assert cli("create")[0] == 0
    code, out, err = cli("events", "-a", "--limit", "2", "--json")
    assert code == 0 and len(out.splitlines()) == 2
    assert "only the first 2 events shown" in err  # the newer ones were left out: said
    code, out, err = cli("events", "-a", "--limit", "100000", "--json")
    assert code == 0 and len(out.splitlines()) > 2 and "only the first" not in err


def test_the_sandbox_filter_of_approvals_is_its_argument(cli: Any, sbx: str) -> None:  # noqa: F811
    code, other, _ = cli("create")
    other = other.strip()
    try:
        code, mine = cli.json("confirm", sbx, "deploy", "--no-wait", "--json")
        assert code == 0
        assert cli.json("confirm", other, "deploy", "--no-wait", "--json")[0] == 0
        code, listed = cli.json("approvals", sbx, "--json")
        assert code == 0 and [a["id"] for a in listed] == [mine["id"]]
        code, out, err = cli("approvals", "--sandbox", sbx, "--json")  # the old spelling
        assert code == 0 and [a["id"] for a in one_json(out)] == [mine["id"]] and "now spelled" in err
        code, doc = cli.json("approvals", "no-such-sandbox", "--json")
        assert code == 1 and assert_json_error(doc, "not_found")
    finally:
        cli("destroy", other)


def test_run_selects_its_sandbox_with_session_id(cli: Any, sbx: str) -> None:  # noqa: F811
    code, out, err = cli("run", "--session-id", sbx, "--", "echo", "in it")
    assert (code, out) == (0, "in it\n"), err
    code, out, err = cli("run", "--sandbox", sbx, "--", "echo", "old")
    assert (code, out) == (0, "old\n") and "--sandbox is now spelled --session-id" in err
    assert sbx in cli.live_ids()  # a selected sandbox is not destroyed by run


# -- teardown agrees: gone already is a success that says so ------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["destroy", "never-was"], "no such sandbox (nothing to do)"),
        (["snapshot", "delete", "never-was"], "no such snapshot (nothing to do)"),
        (["tenant", "delete", "never-was"], "no such tenant (nothing to do)"),
    ],
)
def test_teardown_of_an_unknown_name_succeeds_and_says_so(cli: Any, args: list[str], says: str) -> None:  # noqa: F811
    code, out, _ = cli(*args)
    assert code == 0 and says in out
    code, doc = cli.json(*args, "--json")
    assert code == 0
    first = doc[0] if isinstance(doc, list) else doc
    assert first["existed"] is False


# -- a forgotten -- -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fixed"),
    [
        (["exec", "demo", "python3", "-V"], "hutch exec demo -- python3 -V"),
        (["exec", "-e", "A=1", "demo", "ls", "-la"], "hutch exec -e A=1 demo -- ls -la"),
        (["run", "--memory", "1G", "python3", "-V"], "hutch run --memory 1G -- python3 -V"),
    ],
)
def test_a_forgotten_double_dash_gets_a_hint(cli: Any, args: list[str], fixed: str) -> None:  # noqa: F811
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert "put the command after --" in err
    assert f"hint: {fixed}" in err
    code, doc = cli.json(*args, "--json")
    assert code == 2 and assert_json_error(doc, "invalid")["hint"] == fixed + " --json"


def test_an_unknown_option_before_the_command_is_just_unknown(cli: Any) -> None:  # noqa: F811
    code, _, err = cli("exec", "demo", "--bogus", "--", "true")
    assert code == 2 and "No such option" in err and "put the command after" not in err

