"""``hutch exec SANDBOX -- CMD`` and ``hutch run -- CMD`` with no option run without click
(hutch.cli.plain): the same requests, output, exit code and errors as through the command
tree, which an alias of the same command line still takes (``exec --session-id SANDBOX``,
``hutch --home HOME run``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env

from hutch.cli import plain

CASES: list[tuple[str, ...]] = [
    ("sh", "-c", "echo out; echo err >&2; exit 3"),  # both streams and the workload's exit code
    ("echo a b | tr a-z A-Z; exit 0",),  # one argument with shell syntax: run under /bin/sh -c
    ("printf", "%s|", "two words", "a'quote", "--help"),  # argv as given, options of the command its own
    ("sh", "-c", "seq 1 300000 | head -c 2000000"),  # more than a pipe buffer
    ("sh", "-c", "kill -TERM $$"),  # a signal: 128 + 15
    ("no-such-command-here",),  # 127, with hutch's note and hint
    ("sh", "-c", "cat"),  # stdin: nothing piped, nothing read
]


def cli(
    env: dict[str, str], *args: str, stdin: bytes | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args],
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        cwd=cwd,
    )


def _same(fast: subprocess.CompletedProcess[bytes], tree: subprocess.CompletedProcess[bytes]) -> tuple[object, ...]:
    """What both ways must give alike: exit code, stdout, stderr (a one-shot run's sandbox id aside)."""
    ids = re.compile(rb"sbx_[0-9a-f]+")
    return fast.returncode, fast.stdout, ids.sub(b"SBX", fast.stderr), tree.returncode, tree.stdout, ids.sub(b"SBX", tree.stderr)


def test_the_plain_form_is_recognised_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("_HUTCH_COMPLETE", raising=False)
    monkeypatch.delenv("HUTCH_REUSE", raising=False)
    for args in (
        ["exec", "sbx", "--", "true"],
        ["exec", "demo", "--", "sh", "-c", "x"],
        ["exec", "s", "--", "--help"],
        ["run", "--", "true"],
        ["run", "--", "--json"],  # after --: the command's own words
    ):
        assert plain.applies(args), args
    for args in (
        ["exec", "sbx", "--"],  # no command: the tree says so
        ["exec", "sbx", "true"],  # no --: the tree's grammar (and its hint when an option follows)
        ["exec", "--json", "sbx", "--", "true"],
        ["exec", "-d", "sbx", "--", "true"],
        ["exec", "sbx", "-e", "A=1", "--", "true"],
        ["exec", "--", "sbx", "true"],
        ["exec", "", "--", "true"],
        ["--home", "/tmp/x", "exec", "sbx", "--", "true"],
        ["exec", "--help"],
        ["run", "--"],
        ["run", "true"],
        ["run", "--json", "--", "true"],
        ["run", "--memory", "1G", "--", "true"],
        ["run", "-d", "--", "true"],
        ["--home", "/tmp/x", "run", "--", "true"],
        [],
    ):
        assert not plain.applies(args), args
    monkeypatch.setenv("HUTCH_REUSE", "1")  # stands for --reuse: the tree reads it
    assert not plain.applies(["run", "--", "true"]) and plain.applies(["exec", "sbx", "--", "true"])
    monkeypatch.setenv("_HUTCH_COMPLETE", "bash_complete")
    assert not plain.applies(["exec", "sbx", "--", "true"])


def test_the_plain_path_and_the_command_tree_give_the_same_run(daemon: Daemon) -> None:
    env = hutch_env(daemon.home)
    with daemon.client() as c:
        sbx = str(c.create({"provider": "local", "name": "plain-demo"})["id"])
    for command in CASES:
        for ref in (sbx, "plain-demo"):
            fast = cli(env, "exec", ref, "--", *command)
            tree = cli(env, "exec", "--session-id", ref, "--", *command)
            assert (fast.returncode, fast.stdout, fast.stderr) == (tree.returncode, tree.stdout, tree.stderr), command
    assert cli(env, "exec", sbx, "--", "sh", "-c", "exit 7").returncode == 7
    big = cli(env, "exec", sbx, "--", "head", "-c", "5000000", "/dev/zero")
    assert (big.returncode, len(big.stdout)) == (0, 5_000_000)
    piped = cli(env, "exec", sbx, "--", "wc", "-c", stdin=b"x" * 100_000)  # a piped stdin goes to the command
    assert (piped.returncode, piped.stdout.split()) == (0, [b"100000"]), piped
    # hutch's own failures: the contract's exit codes and words, the same both ways
    for ref, code, words in (("no-such-sbx", 125, b"hutch: not_found: no sandbox 'no-such-sbx'"),):
        fast = cli(env, "exec", ref, "--", "true")
        tree = cli(env, "exec", "--session-id", ref, "--", "true")
        assert fast.returncode == tree.returncode == code and words in fast.stderr and fast.stderr == tree.stderr, fast
        assert b"hint: " in fast.stderr


def test_a_plain_exec_with_no_daemon_reports_it_the_same_way(tmp_path: Path) -> None:
    """A remote daemon that does not answer: exit 125 and the same message both ways (nothing is started
    for a remote endpoint)."""
    env = hutch_env(tmp_path, HUTCH_HOST="http://127.0.0.1:9")
    fast = cli(env, "exec", "sbx_x", "--", "true")
    tree = cli(env, "exec", "--session-id", "sbx_x", "--", "true")
    assert fast.returncode == tree.returncode == 125, fast
    assert fast.stderr == tree.stderr and fast.stderr.startswith(b"hutch: unavailable: "), fast


def test_a_plain_run_and_one_through_the_command_tree_are_the_same(daemon: Daemon, tmp_path: Path) -> None:
    env = hutch_env(daemon.home)
    for command in CASES:
        fast = cli(env, "run", "--", *command)
        tree = cli(env, "--home", str(daemon.home), "run", "--", *command)
        got = _same(fast, tree)
        assert got[:3] == got[3:], command
    piped = cli(env, "run", "--", "wc", "-c", stdin=b"x" * 100_000)  # a piped stdin goes to the command
    assert (piped.returncode, piped.stdout.split()) == (0, [b"100000"]), piped
    with daemon.client() as c:
        assert c.list() == []  # every one-shot sandbox is gone
    # the manifest setting: a hutch.toml in the working directory, both ways
    (tmp_path / "hutch.toml").write_text('[env]\nMODE = "from the manifest"\n')
    menv = env | {"HUTCH_MANIFEST": "hutch.toml"}
    fast = cli(menv, "run", "--", "sh", "-c", "echo $MODE", cwd=tmp_path)
    tree = cli(menv, "--home", str(daemon.home), "run", "--", "sh", "-c", "echo $MODE", cwd=tmp_path)
    assert fast.stdout == tree.stdout == b"from the manifest\n" and fast.returncode == tree.returncode == 0, (fast, tree)
    # a run with HUTCH_REUSE goes through the tree and keeps its sandbox, as it always did
    kept = cli(env | {"HUTCH_REUSE": "1"}, "run", "--", "true", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    with daemon.client() as c:
        assert len(c.list()) == 1


def test_a_plain_run_with_no_daemon_reports_it_the_same_way(tmp_path: Path) -> None:
    env = hutch_env(tmp_path, HUTCH_HOST="http://127.0.0.1:9")
    fast = cli(env, "run", "--", "true")
    tree = cli(env, "--home", str(tmp_path), "run", "--", "true")
    assert fast.returncode == tree.returncode == 125, fast
    assert fast.stderr == tree.stderr and fast.stderr.startswith(b"hutch: unavailable: "), fast
