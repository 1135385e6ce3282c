"""What each package may import, checked on the source with ast."""

from __future__ import annotations

import ast
import graphlib
import statistics
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


# -- the layers -----------------------------------------------------------------------

# Top-level packages and modules of hutch, from the edges down: each may import its own
# layer and the layers below it, never one above (DESIGN.md: edges -> client -> server ->
# service -> providers/store -> wire/models/errors). hutch.testing sits above everything:
# the doubles may use any layer, and production never imports them (tested above).
LAYERS: list[tuple[str, set[str]]] = [
    ("testing", {"testing"}),
    ("edges", {"__init__", "__main__", "cli", "mcp", "sdk"}),
    ("client", {"client"}),
    ("server", {"server"}),
    ("service", {"service"}),
    ("providers/store", {"provider", "providers", "store"}),
    # the floor: the wire contract, the models, the errors, and the pure helpers all use
    (
        "wire/models/errors",
        {
            "wire",
            "models",
            "netpolicy",
            "secretpolicy",
            "policy",
            "checks",
            "units",
            "config",
            "credentials",
            "credhelper",
            "tokens",
            "errors",
            "casts",
            "jsonwire",
            "_version",
            "imageref",
            "fdlimit",
            "actors",
            "pki",
            "seeds",
            "manifest",
        },
    ),
]
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}

# Module sizes: none over 500 lines.
MAX_LINES = 500
OVERSIZED: set[str] = set()


def _unit(module: str) -> str:
    """The top-level package or module of hutch that ``module`` (``hutch.x.y``) is in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _units() -> set[str]:
    return {p.stem if p.suffix == ".py" else p.name for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def unit_imports() -> Iterator[tuple[str, str, str]]:
    """(importing file, its unit, the unit it imports) for every import of hutch code, in
    functions and under ``if TYPE_CHECKING`` too: a type-only import follows the rule as well."""
    units = _units()
    for name, tree in modules():
        me = _unit(name.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                # only the in-sandbox agent uses them (inside the sandbox its package is not hutch's)
                yield name, me, _unit(relative(name, node))
            elif isinstance(node, ast.ImportFrom) and node.module == "hutch":
                # ``from hutch import wire`` imports the module; ``from hutch import Sandbox`` the root
                yield from ((name, me, a.name if a.name in units else "__init__") for a in node.names)
            else:
                for module in imported_modules(node):
                    if module == "hutch" or module.startswith("hutch."):
                        yield name, me, _unit(module)


def relative(name: str, node: ast.ImportFrom) -> str:
    """The module a relative import in file ``name`` (``hutch/x/y.py``) imports, by its full name."""
    package = name.removesuffix(".py").split("/")[: -node.level]
    return ".".join(package + ([node.module] if node.module else []))


def imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module]
    return []


def test_every_top_level_module_has_a_layer() -> None:
    assert _units() - set(RANK) == set(), "add it to LAYERS in this test, in the layer it belongs to"


def test_imports_flow_from_the_edges_down() -> None:
    """edges (cli, mcp, sdk) -> client -> server -> service -> providers/store -> wire/models/errors."""
    upward = sorted(
        f"{name} imports hutch.{target} ({LAYERS[RANK[target]][0]}, above {LAYERS[RANK[me]][0]})"
        for name, me, target in unit_imports()
        if RANK.get(target, len(LAYERS)) < RANK.get(me, -1)
    )
    assert upward == []


def test_no_import_cycles_between_top_level_packages() -> None:
    graph: dict[str, set[str]] = {unit: set() for unit in _units()}
    for _, me, target in unit_imports():
        if target != me:
            graph[me].add(target)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None
    assert set(order) == _units()


def test_the_edges_never_import_providers_or_the_store() -> None:
    """The CLI, the SDK, the MCP server and the client speak to the daemon. Two lazy imports
    are known: ``hutch doctor`` runs the checks in this process (the Service), and ``hutch
    ssh`` uses the Unikraft provider's SSH client."""
    edges = {"cli", "mcp", "sdk", "client"}
    found = {(name, target) for name, me, target in unit_imports() if me in edges and target in {"providers", "store", "service"}}
    assert found == {("hutch/cli/system.py", "service"), ("hutch/cli/ssh.py", "providers")}


def test_no_packages_in_disguise() -> None:
    """No flat sibling modules with a common prefix (``client_*.py``, ``sdk_*.py``, ``store_*.py``,
    ``wire_*.py``): they are a package's modules."""
    flat = sorted(p.stem for p in SRC.glob("*.py") if not p.stem.startswith("_"))
    prefixes: dict[str, list[str]] = {}
    for stem in flat:
        if "_" in stem:
            prefixes.setdefault(stem.split("_")[0], []).append(stem)
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert {prefix: stems for prefix, stems in prefixes.items() if prefix in packages or prefix in flat or len(stems) > 1} == {}
    assert {"client", "sdk", "store", "wire", "testing"} <= packages


def test_module_sizes() -> None:
    """No module over 500 lines; the median under 150 (``find src -name '*.py' | xargs wc -l``)."""
    sizes = {p.relative_to(SRC.parent).as_posix(): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES and name not in OVERSIZED} == {}
    for name in OVERSIZED & set(sizes):
        assert sizes[name] > MAX_LINES, f"{name} is no longer oversized: drop it from OVERSIZED"
    assert statistics.median(sizes.values()) < 150
