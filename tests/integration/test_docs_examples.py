"""The SDK examples in the docs run: every complete ```python example (one that imports
hutch itself) is executed against a real daemon, and must exit 0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, Daemon, hutch_env

BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples() -> list[tuple[str, int, str]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, code in enumerate(BLOCK.findall(doc.read_text())):
            if re.search(r"^import hutch$", code, re.M):  # a complete example, not a fragment
                found.append((doc.name, i, code))
    return found


def test_there_are_runnable_examples() -> None:
    docs = {name for name, _, _ in examples()}
    assert {"README.md", "sdk.md"} <= docs, docs


@pytest.mark.parametrize(("doc", "index", "code"), examples(), ids=[f"{d}#{i}" for d, i, _ in examples()])
def test_example_runs(daemon: Daemon, doc: str, index: int, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    r = subprocess.run(
        [sys.executable, str(script)], env=hutch_env(daemon.home), capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode == 0, f"{doc} example {index} failed:\n{code}\n--- stderr ---\n{r.stderr[-3000:]}"
