"""hutch skill install|show: the rendered skill, where it goes, --force, and that every
command it mentions exists."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
from tests.unit.test_docs import example_problems, invoked_paths

from hutch.cli import cli, main
from hutch.cli.catalog import subcommands
from hutch.cli.skill import ADVICE, render
from hutch.errors import KINDS

FILES = {"SKILL.md", "references/commands.md", "references/results.md"}


@pytest.fixture
def user_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A temporary HOME; the agents' own relocation variables are unset."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return tmp_path


def hutch(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main(list(args))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in args else out


def frontmatter(text: str) -> dict[str, str]:
    m = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert m, "SKILL.md has no YAML frontmatter"
    return dict(line.split(": ", 1) for line in m.group(1).splitlines())


def all_paths(group: click.Group) -> list[str]:
    out = []

    def visit(command: click.Command, path: tuple[str, ...]) -> None:
        if path:
            out.append(" ".join(path))
        if isinstance(command, click.Group):
            for name, sub in subcommands(command):
                visit(sub, (*path, name))

    visit(group, ())
    return out


def test_the_skill_has_frontmatter_and_every_placeholder_filled() -> None:
    files = render(cli)
    assert set(files) == FILES
    meta = frontmatter(files["SKILL.md"])
    assert meta["name"] == "hutch"
    for trigger in ("run this in a sandbox", "untrusted", "reproduce a build", "test a script"):
        assert trigger in meta["description"]
    for name, text in files.items():
        assert not re.search(r"\{\{\s*\w+\s*\}\}", text), name


def test_the_skill_teaches_the_contract() -> None:
    text = render(cli)["SKILL.md"]
    for needle in ("hutch doctor", "hutch create", "hutch write", "hutch exec", "hutch read", "hutch destroy", "hutch run"):
        assert needle in text
    for needle in ("**124**", "**125**", "**2**", "exit_code", '{"error"', "--timeout", "--memory", "--mount", "--max-output"):
        assert needle in text


def test_the_error_table_has_every_kind() -> None:
    assert set(ADVICE) == set(KINDS)
    text = render(cli)["SKILL.md"]
    for kind in KINDS:
        assert re.search(rf"^\| `{kind}` \| [^|]+ \| \S", text, re.MULTILINE), kind


def test_the_command_lists_are_generated_from_the_live_tree() -> None:
    files = render(cli)
    for path in all_paths(cli):
        assert f"| `hutch {path} " in files["SKILL.md"] or f"| `hutch {path}` " in files["SKILL.md"], path
        assert f"\n## hutch {path}\n" in files["references/commands.md"], path
    for path, command in ((p, c) for p, c in _commands(cli)):
        section = files["references/commands.md"].split(f"\n## hutch {path}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option):
                for flag in param.opts:
                    assert f"`{flag}`" in section, (path, flag)


def _commands(group: click.Group) -> list[tuple[str, click.Command]]:
    paths = all_paths(group)
    out = []
    for path in paths:
        command: click.Command = group
        for word in path.split():
            assert isinstance(command, click.Group)
            found = command.get_command(click.Context(command), word)
            assert found is not None, word
            command = found
        out.append((path, command))
    return out


def test_a_new_command_shows_up_in_the_skill() -> None:
    @click.group()
    def root() -> None: ...

    @root.command()
    @click.option("--frobnicate", help="Frobnicate harder.")
    def zap(frobnicate: str | None) -> None:
        """Zap a sandbox."""

    files = render(root)
    assert "| `hutch zap [OPTIONS]` | Zap a sandbox. |" in files["SKILL.md"]
    assert "`--frobnicate`" in files["references/commands.md"]


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_command_the_skill_mentions_exists(name: str) -> None:
    text = render(cli)[name]
    assert invoked_paths(text), f"{name} shows no hutch command"
    assert example_problems(cli, text) == []


def test_the_mention_check_can_fail() -> None:
    assert example_problems(cli, "run `hutch sandbox create` then `hutch daemon restart`") == [
        "'hutch sandbox' is not a command",
        "'hutch daemon restart' is not a command",
    ]


# -- install ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "dirs"),
    [
        ("claude", [".claude/skills/hutch"]),
        ("codex", [".codex/skills/hutch"]),
        ("all", [".claude/skills/hutch", ".codex/skills/hutch"]),
    ],
)
def test_install_for_each_target(capsys: pytest.CaptureFixture[str], user_home: Path, target: str, dirs: list[str]) -> None:
    code, doc = hutch(capsys, "skill", "install", "--target", target, "--json")
    assert code == 0
    assert [d["dir"] for d in doc["installed"]] == [str(user_home / d) for d in dirs]
    rendered = render(cli)
    for d in dirs:
        for rel, text in rendered.items():
            assert (user_home / d / rel).read_text() == text
    others = {".claude/skills/hutch", ".codex/skills/hutch"} - set(dirs)
    assert not any((user_home / o).exists() for o in others)


def test_install_defaults_to_every_target_and_honours_the_agents_variables(
    capsys: pytest.CaptureFixture[str], user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_HOME", str(user_home / "codex-home"))
    code, out = hutch(capsys, "skill", "install")
    assert code == 0
    assert (user_home / ".claude/skills/hutch/SKILL.md").is_file()
    assert (user_home / "codex-home/skills/hutch/SKILL.md").is_file()
    assert "installed the hutch skill for claude" in out


def test_install_into_a_directory(capsys: pytest.CaptureFixture[str], user_home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "project" / ".claude" / "skills" / "hutch"
    code, doc = hutch(capsys, "skill", "install", "--dir", str(dest), "--json")
    assert code == 0
    assert doc["installed"][0]["dir"] == str(dest)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(FILES)
    assert not (user_home / ".claude").exists()


def test_dir_and_target_together_are_refused(capsys: pytest.CaptureFixture[str], user_home: Path) -> None:
    code, doc = hutch(capsys, "skill", "install", "--dir", str(user_home / "x"), "--target", "codex", "--json")
    assert code == 2
    assert doc["error"]["kind"] == "invalid"


def test_an_existing_skill_needs_force_and_unrelated_files_survive(capsys: pytest.CaptureFixture[str], user_home: Path) -> None:
    dest = user_home / ".claude/skills/hutch"
    (dest / "references").mkdir(parents=True)
    (dest / "SKILL.md").write_text("old skill\n")
    (dest / "notes.txt").write_text("mine\n")
    (dest / "references" / "local.md").write_text("also mine\n")

    code, doc = hutch(capsys, "skill", "install", "--target", "claude", "--json")
    assert code == 1
    assert doc["error"]["kind"] == "conflict"
    assert "--force" in doc["error"]["hint"]
    assert (dest / "SKILL.md").read_text() == "old skill\n"  # untouched

    code, doc = hutch(capsys, "skill", "install", "--target", "claude", "--force", "--json")
    assert code == 0 and doc["installed"][0]["replaced"] is True
    assert (dest / "SKILL.md").read_text() == render(cli)["SKILL.md"]
    assert (dest / "notes.txt").read_text() == "mine\n"
    assert (dest / "references" / "local.md").read_text() == "also mine\n"
    assert not [p for p in dest.rglob(".*") if p.is_file()], "temporary files left behind"


def test_all_targets_are_checked_before_anything_is_written(capsys: pytest.CaptureFixture[str], user_home: Path) -> None:
    codex = user_home / ".codex/skills/hutch"
    codex.mkdir(parents=True)
    (codex / "SKILL.md").write_text("someone else's\n")
    code, _ = hutch(capsys, "skill", "install", "--target", "all", "--json")
    assert code == 1
    assert not (user_home / ".claude").exists()
    assert (codex / "SKILL.md").read_text() == "someone else's\n"


def test_an_empty_directory_needs_no_force(capsys: pytest.CaptureFixture[str], user_home: Path) -> None:
    (user_home / ".claude/skills/hutch").mkdir(parents=True)
    code, _ = hutch(capsys, "skill", "install", "--target", "claude", "--json")
    assert code == 0


# -- show ---------------------------------------------------------------------------------


def test_show_prints_what_install_writes(capsys: pytest.CaptureFixture[str]) -> None:
    rendered = render(cli)
    code, out = hutch(capsys, "skill", "show")
    assert code == 0 and out == rendered["SKILL.md"]
    code, out = hutch(capsys, "skill", "show", "--file", "references/commands.md")
    assert code == 0 and out == rendered["references/commands.md"]
    code, doc = hutch(capsys, "skill", "show", "--json")
    assert code == 0 and doc == {"name": "hutch", "files": rendered}


def test_show_refuses_an_unknown_file(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["skill", "show", "--file", "nope.md"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no file 'nope.md'" in err and "references/commands.md" in err
