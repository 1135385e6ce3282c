"""The parts of docs/ the code defines are generated from it (scripts/gen_docs.py) and the
committed pages match what the generator produces now: docs/api.md from the daemon's
OpenAPI, the MCP tool reference in docs/mcp.md and the tool list in docs/cli.md. And a few
claims that cannot be generated are held here (their behaviour is tested in
tests/integration/test_docs_claims.py)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()


@pytest.fixture(scope="module")
def tools() -> list[dict[str, Any]]:
    return list(gen.mcp_tools())


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return dict(gen.openapi())


def test_the_generated_pages_are_up_to_date(clean_env: pytest.MonkeyPatch) -> None:
    stale = [str(p.relative_to(ROOT)) for p in gen.stale()]
    assert stale == [], f"out of date: {stale}; run: python3 scripts/gen_docs.py"


def test_the_api_reference_has_every_route_and_schema(spec: dict[str, Any]) -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    routes = [(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in gen.HTTP_METHODS]
    assert len(routes) >= 40
    for method, path in routes:
        assert f"\n## {method} {path}\n" in text, (method, path)
    for name in spec["components"]["schemas"]:
        assert f"\n### {name}\n" in text, name
    exec_result = spec["components"]["schemas"]["ExecResult"]["properties"]
    assert all(f"| `{field}` |" in text for field in exec_result)


def test_the_mcp_reference_has_every_tool_and_parameter(tools: list[dict[str, Any]]) -> None:
    mcp_md = (ROOT / "docs" / "mcp.md").read_text()
    cli_md = (ROOT / "docs" / "cli.md").read_text()
    mcp_section = cli_md.split("\n## hutch mcp\n", 1)[1].split("\n## ", 1)[0]
    assert len(tools) >= 20
    assert f"The server has {len(tools)} tools." in mcp_md
    for t in tools:
        section = mcp_md.split(f"\n### {t['name']}\n", 1)[1].split("\n### ", 1)[0]
        for parameter in t["inputSchema"].get("properties", {}):
            assert f"| `{parameter}` |" in section, (t["name"], parameter)
        assert f"`{t['name']}`" in mcp_section, t["name"]


def test_the_check_catches_a_page_that_drifted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies = {}
    for name in ("API_MD", "MCP_MD", "CLI_MD"):
        path: Path = getattr(gen, name)
        copies[name] = tmp_path / path.name
        shutil.copy(path, copies[name])
        monkeypatch.setattr(gen, name, copies[name])
    assert gen.main(["--check"]) == 0
    text = copies["MCP_MD"].read_text()
    copies["MCP_MD"].write_text(text.replace("| `sandbox` | string | required |", "| `sandbox` | integer | required |", 1))
    copies["API_MD"].write_text(copies["API_MD"].read_text() + "\n## GET /v1/invented\n")
    assert sorted(p.name for p in gen.stale()) == ["api.md", "mcp.md"]
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0  # regenerate
    assert gen.main(["--check"]) == 0
    assert copies["MCP_MD"].read_text() == text


# -- claims that are not generated ------------------------------------------------------


def shell_code(text: str) -> list[str]:
    blocks = re.findall(r"^```(?:sh|bash|shell|console)?\n(.*?)^```", text, re.M | re.S)
    return blocks + re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_commands_in_the_docs_do_not_assume_a_virtualenv_in_the_work_tree(doc: Path) -> None:
    # a fresh clone has no .venv: commands use the interpreter hutch is installed in
    for code in shell_code(doc.read_text()):
        assert not re.search(r"(^|[\s;&|(])\.venv/bin/", code, re.M), f"{doc.name}: {code!r}"


def test_no_doc_says_reading_a_directory_is_internal() -> None:
    for doc in DOCS:
        for paragraph in doc.read_text().split("\n\n"):
            flat = " ".join(paragraph.split())
            if re.search(r"\bdirector(y|ies)\b", flat) and re.search(r"`internal`|InternalError", flat):
                assert not re.search(r"read\w*[^.]*\bdirectory\b|\bdirectory\b[^.]*\brefused\b", flat), f"{doc.name}: {flat}"
    sdk = " ".join((ROOT / "docs" / "sdk.md").read_text().split())
    assert "`invalid` (reading a directory," in sdk


def test_the_mcp_page_does_not_deny_what_sandbox_create_takes(tools: list[dict[str, Any]]) -> None:
    create = next(t for t in tools if t["name"] == "sandbox_create")
    assert {"network", "allow_hosts"} <= set(create["inputSchema"]["properties"])
    text = " ".join((ROOT / "docs" / "mcp.md").read_text().split())
    assert "have no mounts and no network." not in text
    assert "no network unless `sandbox_create` is given `network` or `allow_hosts`" in text
