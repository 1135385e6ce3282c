"""The official E2B Python SDK in a virtual environment of its own (it pins connectrpc<0.13
and pyqwest, which hutch's environment need not share), made once per SDK version under the
test cache (HUTCH_TEST_CACHE or /var/cache/hutch-tests) and reused by later runs, and a way
to run a script with it against a gateway."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.integration.debian_root import CACHE

E2B_VERSION = os.environ.get("HUTCH_TEST_E2B_VERSION", "2.63.0")  # pinned; "latest" for the newest


def sdk_python() -> Path:
    """The venv's python, made when missing (a lock file keeps two sessions from racing)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / f"e2b-sdk-{E2B_VERSION}"
    python = venv / "bin" / "python"
    done = CACHE / f"e2b-sdk-{E2B_VERSION}.complete"
    with open(CACHE / "e2b-sdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and python.exists() and E2B_VERSION != "latest":
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        spec = "e2b" if E2B_VERSION == "latest" else f"e2b=={E2B_VERSION}"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", spec], check=True, timeout=900)
        done.write_text(E2B_VERSION + "\n")
    return python


def run_sdk(python: Path, env: dict[str, str], script: str, timeout: float = 300) -> dict[str, Any]:
    """Run ``script`` (its last statement fills the dict ``out``) with the SDK; ``out`` back as JSON."""
    body = "import json, sys, time\nout = {}\n" + textwrap.dedent(script) + "\nprint('@@' + json.dumps(out, default=str))\n"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "HUTCH_"))} | env
    r = subprocess.run([str(python), "-c", body], env=full_env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in r.stdout.splitlines() if line.startswith("@@")]
    assert r.returncode == 0 and lines, f"SDK script failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return dict(json.loads(lines[-1][2:]))
