"""What each package may import, checked on the source with ast."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import hutch

SRC = Path(hutch.__file__).resolve().parent


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC.parent).as_posix(), ast.parse(path.read_text(), str(path))


def imported(tree: ast.Module) -> Iterator[str]:
    """Every module an import statement names, anywhere in the file (also inside functions)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_only_the_store_imports_sqlite3() -> None:
    importers = {name for name, tree in modules() if any(m.split(".")[0] == "sqlite3" for m in imported(tree))}
    assert importers, "the store imports sqlite3"
    assert {name for name in importers if not name.startswith("hutch/store/")} == set()
