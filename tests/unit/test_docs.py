"""The CLI reference (docs/cli.md) and the examples in the README and quickstart match the
real command tree: every command has a ``## hutch PATH`` section documenting each of its
options, no section or option table row describes something that does not exist, and
every ``hutch CMD`` shown in code exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from hutch.cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
EXAMPLE_DOCS = [ROOT / "README.md", ROOT / "docs" / "quickstart.md"]

HEADING = re.compile(r"^## (hutch(?: [a-z][a-z0-9-]*)*)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console", "zsh"}
INLINE = re.compile(r"`([^`\n]+)`")
INVOCATION = re.compile(r"(?<![\w./$-])hutch(?![\w.-])((?:[ \t]+[^\s|;&)`]+)*)")
TABLE_FLAG = re.compile(r"`(--?[A-Za-z][\w-]*)")


def walk(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in sorted(command.list_commands(ctx)):  # lazy groups import a command on get_command
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from walk(sub, (*path, name))


def heading(path: tuple[str, ...]) -> str:
    return " ".join(("hutch", *path))


def long_flags(command: click.Command) -> list[str]:
    flags = []
    for param in command.params:
        if isinstance(param, click.Option):
            flags += [f for f in (*param.opts, *param.secondary_opts) if f.startswith("--")]
    return flags


def all_flags(command: click.Command) -> set[str]:
    flags = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            flags.update((*param.opts, *param.secondary_opts))
    return flags


def sections(text: str) -> dict[str, str]:
    """``hutch daemon stop`` -> the text of its section, up to the next ``## ``."""
    out: dict[str, str] = {}
    matches = list(HEADING.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end]
        nxt = re.search(r"^## ", body, re.MULTILINE)
        out[m.group(1)] = body[: nxt.start()] if nxt else body
    return out


def mentions(text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def reference_problems(group: click.Group, text: str) -> list[str]:
    """Everything docs/cli.md gets wrong about ``group``; empty when it is honest."""
    problems: list[str] = []
    docs = sections(text)
    tree = dict(walk(group))
    for path, command in tree.items():
        name = heading(path)
        if name not in docs:
            problems.append(f"no '## {name}' section")
            continue
        for flag in long_flags(command):
            if not mentions(docs[name], flag):
                problems.append(f"'## {name}' does not mention {flag}")
        known = all_flags(command)
        for row in docs[name].splitlines():
            if row.startswith("| `-"):
                first_cell = row.split("|")[1]
                for flag in TABLE_FLAG.findall(first_cell):
                    if flag not in known:
                        problems.append(f"'## {name}' documents {flag}, which the command does not have")
    documented = set(docs)
    for name in sorted(documented - {heading(p) for p in tree}):
        problems.append(f"'## {name}' documents a command that does not exist")
    return problems


def code_snippets(text: str) -> list[str]:
    """Shell code blocks (not output, Python or JSON) and inline code spans."""
    blocks = [body for lang, body in FENCE.findall(text) if lang in SHELL_BLOCKS]
    prose = FENCE.sub("", text)
    return blocks + INLINE.findall(prose)


def invoked_paths(text: str) -> list[tuple[str, ...]]:
    """The command words of every ``hutch ...`` invocation shown in code."""
    out = []
    for snippet in code_snippets(text):
        for line in snippet.splitlines():
            for m in INVOCATION.finditer(line):
                words = m.group(1).split()
                path: list[str] = []
                skip = False
                for word in words:
                    if skip:
                        skip = False
                    elif word == "--home":
                        skip = True
                    elif word.startswith("-") or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
                        if path:
                            break
                        if word.startswith("-"):
                            continue
                        break
                    else:
                        path.append(word)
                        if len(path) == 2:
                            break
                out.append(tuple(path))
    return out


def resolve(group: click.Group, path: tuple[str, ...]) -> str | None:
    """None when ``hutch PATH`` names real commands, else what is wrong."""
    command: click.Command = group
    for i, word in enumerate(path):
        if not isinstance(command, click.Group):
            return None  # the rest are arguments
        sub = command.get_command(click.Context(command), word)
        if sub is None:
            return f"'hutch {' '.join(path[: i + 1])}' is not a command"
        command = sub
    return None


def example_problems(group: click.Group, text: str) -> list[str]:
    problems = []
    for path in invoked_paths(text):
        wrong = resolve(group, path)
        if wrong:
            problems.append(wrong)
    return problems


# -- the real tree ---------------------------------------------------------------------


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    assert reference_problems(cli, CLI_MD.read_text()) == []


def test_the_tree_has_the_commands_we_document() -> None:
    paths = {heading(p) for p, _ in walk(cli)}
    assert {"hutch run", "hutch exec", "hutch daemon", "hutch daemon stop", "hutch serve"} <= paths


@pytest.mark.parametrize("doc", EXAMPLE_DOCS, ids=lambda p: p.name)
def test_examples_use_real_commands(doc: Path) -> None:
    text = doc.read_text()
    assert invoked_paths(text), f"{doc.name} shows no hutch command at all"
    assert example_problems(cli, text) == []


# -- the checks themselves can fail ----------------------------------------------------


def _tree() -> click.Group:
    @click.group()
    def root() -> None: ...

    @root.command()
    @click.option("--memory")
    @click.option("--json", "json_", is_flag=True)
    def create(memory: str | None, json_: bool) -> None: ...

    @root.group()
    def daemon() -> None: ...

    @daemon.command()
    @click.option("--timeout", type=float)
    def stop(timeout: float | None) -> None: ...

    return root


GOOD = """
## hutch

## hutch create

| option | meaning |
|---|---|
| `--memory TEXT` | limit |
| `--json` | json |

## hutch daemon

## hutch daemon stop

| `--timeout FLOAT` | seconds |
"""


def test_the_reference_check_accepts_a_complete_page() -> None:
    assert reference_problems(_tree(), GOOD) == []


def test_the_reference_check_catches_an_undocumented_command() -> None:
    tree = _tree()

    @tree.command()
    def destroy() -> None: ...

    assert reference_problems(tree, GOOD) == ["no '## hutch destroy' section"]


def test_the_reference_check_catches_an_undocumented_option() -> None:
    tree = _tree()
    tree.commands["create"].params.append(click.Option(["--pids"], type=int))
    assert reference_problems(tree, GOOD) == ["'## hutch create' does not mention --pids"]


def test_an_option_of_another_section_does_not_count() -> None:
    text = GOOD.replace("| `--timeout FLOAT` | seconds |", "")
    assert reference_problems(_tree(), text) == ["'## hutch daemon stop' does not mention --timeout"]


def test_the_reference_check_catches_invented_commands_and_options() -> None:
    text = GOOD + "\n## hutch daemon restart\n" + "\n## hutch list\n\n| `--all` | all |\n"
    text = text.replace("| `--json` | json |", "| `--json` | json |\n| `--cpus FLOAT` | cores |")
    assert reference_problems(_tree(), text) == [
        "'## hutch create' documents --cpus, which the command does not have",
        "'## hutch daemon restart' documents a command that does not exist",
        "'## hutch list' documents a command that does not exist",
    ]


def test_the_example_check_catches_unknown_commands() -> None:
    text = """
Run `hutch create --memory 1G` then `hutch daemon stop`; hutch runs things (prose is ignored).

```sh
SBX=$(hutch create) && hutch --home /tmp/h daemon stop --timeout 3
hutch destroy $SBX
hutch daemon restart
```

```text
hint: run hutch as root (output blocks are not checked)
```
"""
    assert sorted(invoked_paths(text)) == sorted(
        [
            ("create",),
            ("daemon", "stop"),
            ("create",),
            ("daemon", "stop"),
            ("destroy",),
            ("daemon", "restart"),
        ]
    )
    assert example_problems(_tree(), text) == [
        "'hutch destroy' is not a command",
        "'hutch daemon restart' is not a command",
    ]
