"""The CLI starts fast: loading the command tree imports none of the heavy libraries.

pydantic (the models), httpx, rich, fastapi/uvicorn and the providers are imported only by the
commands that use them, when they run; each of them costs tens of milliseconds per call.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pydantic", "httpx", "rich", "fastapi", "starlette", "uvicorn", "yaml", "jsonschema", "hutch.models", "hutch.providers")


def test_loading_the_cli_imports_nothing_heavy() -> None:
    code = "import sys, json, hutch.cli; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY or m.startswith(HEAVY)]
    assert heavy == []
