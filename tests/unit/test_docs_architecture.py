"""docs/architecture.md names real things: every ``src/hutch/...``, ``tests/...``, ``docs/...``
and ``scripts/...`` path on it exists, every ``path.py:Name`` (or ``path.py:Class.method``)
is defined in that file, every ``tests/...py::test_name`` is a test there, and every link to
another page of docs/ reaches an existing page and heading. So the page cannot rot quietly:
a rename or a move that forgets it fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"

PATH = re.compile(r"(?<![\w/.-])((?:src/hutch|tests|docs|scripts)(?:/[\w.-]+)*/?)(?::{1,2}([A-Za-z_][\w.]*))?")
LINK = re.compile(r"\]\(([\w.-]+\.md)?(?:#([\w-]+))?\)")


def references(text: str) -> list[tuple[str, str | None]]:
    """(path, the name after ``:`` or ``::`` or None) for every path the page names."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        out.append((path, m.group(2)))
    return out


def names(node: ast.stmt) -> set[str]:
    """What a statement defines: a function, a class, or the names an assignment binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def defined(source: str, name: str) -> bool:
    """``name`` (``f``, ``Class``, ``CONSTANT`` or ``Class.method``) is defined at the top of ``source``."""
    scope: list[ast.stmt] = ast.parse(source).body
    for part in name.split("."):
        found = next((n for n in scope if part in names(n)), None)
        if found is None:
            return False
        scope = found.body if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
    return True


def anchors(markdown: str) -> set[str]:
    """The GitHub anchors of a page's headings."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def problems(text: str, root: Path = ROOT) -> list[str]:
    found = []
    for path, name in references(text):
        target = root / path
        if not target.exists():
            found.append(f"{path} does not exist")
        elif name is not None and target.suffix == ".py" and not defined(target.read_text(), name):
            found.append(f"{path} defines no {name}")
    for page, anchor in LINK.findall(text):
        target = root / "docs" / page
        if not page:  # a heading of this page
            if anchor not in anchors(text):
                found.append(f"link to #{anchor}, which has no such heading")
        elif not target.exists():
            found.append(f"link to {page}, which does not exist")
        elif anchor and anchor not in anchors(target.read_text()):
            found.append(f"link to {page}#{anchor}, which has no such heading")
    return found


def test_the_architecture_page_names_only_what_exists() -> None:
    text = PAGE.read_text()
    assert len({p for p, _ in references(text) if p.startswith("src/hutch/")}) >= 40, "the page names the code it describes"
    assert problems(text) == []


def test_the_readme_links_the_architecture_page() -> None:
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text()


# -- the check itself can fail -----------------------------------------------------------


def test_the_check_catches_a_missing_path_name_test_and_heading() -> None:
    text = """
`src/hutch/service/runs.py:Runs.stream` and `src/hutch/cli/run.py:exec_` are real;
`tests/unit/test_packages.py::test_only_the_store_imports_sqlite3` too, and [exit codes](concepts.md#exit-codes).
But `src/hutch/service/gone.py`, `src/hutch/service/runs.py:Runs.vanished`,
`src/hutch/cli/run.py:nothing`, `tests/unit/test_packages.py::test_invented`,
[a page](nowhere.md), [a heading](concepts.md#no-such-heading) and [one here](#nor-here) are not;
[this one](#a-heading-here) is.

## A heading, here
"""
    assert problems(text) == [
        "src/hutch/service/gone.py does not exist",
        "src/hutch/service/runs.py defines no Runs.vanished",
        "src/hutch/cli/run.py defines no nothing",
        "tests/unit/test_packages.py defines no test_invented",
        "link to nowhere.md, which does not exist",
        "link to concepts.md#no-such-heading, which has no such heading",
        "link to #nor-here, which has no such heading",
    ]
