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


def test_production_code_never_imports_hutch_testing() -> None:
    found = {
        (name, m)
        for name, tree in modules()
        if not name.startswith("hutch/testing/")
        for m in imported(tree)
        if m == "hutch.testing" or m.startswith("hutch.testing.")
    }
    assert found == set()
    assert {name for name, _ in modules() if name.startswith("hutch/testing/")}, "hutch.testing is where the doubles live"


def test_test_doubles_are_not_among_the_providers() -> None:
    """The Unikraft test server, its testbed and its SSH front live in hutch.testing."""
    unikraft = SRC / "providers" / "unikraft"
    assert {p.name for p in unikraft.glob("*.py")} & {"testserver.py", "testbed.py", "sshserver.py"} == set()


def test_the_version_comes_from_its_own_module() -> None:
    """``__version__`` lives in hutch/_version.py; nothing takes it from the package root
    (which would tie every importer to hutch/__init__.py), the root only re-exports it."""
    from hutch import _version

    assert hutch.__version__ is _version.__version__
    bench = Path(__file__).resolve().parents[2] / "bench"
    trees = [*modules(), *((p.name, ast.parse(p.read_text())) for p in sorted(bench.glob("*.py")))]
    assert {name for name, tree in trees if any(_root_version(node) for node in ast.walk(tree))} == set()


def _root_version(node: ast.AST) -> bool:
    """``from hutch import __version__`` or ``hutch.__version__``."""
    if isinstance(node, ast.ImportFrom):
        return node.module == "hutch" and any(alias.name == "__version__" for alias in node.names)
    if isinstance(node, ast.Attribute):
        return node.attr == "__version__" and isinstance(node.value, ast.Name) and node.value.id == "hutch"
    return False
