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
INTERPRETER_VERSION = os.environ.get("HUTCH_TEST_E2B_INTERPRETER_VERSION", "2.11.5")  # e2b-code-interpreter


def sdk_python(interpreter: bool = False) -> Path:
    """The venv's python, made when missing (a lock file keeps two sessions from racing);
    ``interpreter``: with ``e2b-code-interpreter`` too (a venv of its own)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    latest = E2B_VERSION == "latest" or (interpreter and INTERPRETER_VERSION == "latest")
    specs = ["e2b" if E2B_VERSION == "latest" else f"e2b=={E2B_VERSION}"]
    name = f"e2b-sdk-{E2B_VERSION}"
    if interpreter:
        specs.append(
            "e2b-code-interpreter" if INTERPRETER_VERSION == "latest" else f"e2b-code-interpreter=={INTERPRETER_VERSION}"
        )
        name += f"-interpreter-{INTERPRETER_VERSION}"
    venv = CACHE / name
    python = venv / "bin" / "python"
    done = CACHE / f"{name}.complete"
    with open(CACHE / "e2b-sdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and python.exists() and not latest:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", *specs], check=True, timeout=900)
        done.write_text(" ".join(specs) + "\n")
    return python


def run_sdk(python: Path, env: dict[str, str], script: str, timeout: float = 300) -> dict[str, Any]:
    """Run ``script`` (its last statement fills the dict ``out``) with the SDK; ``out`` back as JSON."""
    body = "import json, sys, time\nout = {}\n" + textwrap.dedent(script) + "\nprint('@@' + json.dumps(out, default=str))\n"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "HUTCH_"))} | env
    r = subprocess.run([str(python), "-c", body], env=full_env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in r.stdout.splitlines() if line.startswith("@@")]
    assert r.returncode == 0 and lines, f"SDK script failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return dict(json.loads(lines[-1][2:]))


E2B_JS_VERSION = os.environ.get("HUTCH_TEST_E2B_JS_VERSION", "2.51.0")  # npm e2b, pinned


def js_sdk() -> Path:
    """An npm prefix with the official JS SDK, installed when missing: ``HUTCH_TEST_E2B_JS``
    (where .ci/run has it installed, in a temp dir), else one per version under the test
    cache. No lockfile; npm's own cache beside it."""
    given = os.environ.get("HUTCH_TEST_E2B_JS")
    prefix = Path(given) if given else CACHE / f"e2b-js-{E2B_JS_VERSION}"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / "e2b-js.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = prefix / "node_modules" / "e2b" / "package.json"
        if installed.is_file() and json.loads(installed.read_text()).get("version") == E2B_JS_VERSION:
            return prefix
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir()
        npm = ["npm", "install", "--prefix", str(prefix), "--no-package-lock", "--no-audit", "--no-fund", "--silent"]
        subprocess.run([*npm, "--cache", str(prefix / ".npm"), f"e2b@{E2B_JS_VERSION}"], check=True, timeout=900)
    return prefix


def run_js(prefix: Path, env: dict[str, str], script: Path, timeout: float = 300) -> dict[str, Any]:
    """Run a node script with the JS SDK; the JSON it prints after ``@@`` back."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "HUTCH_"))} | env | {"E2B_JS_SDK": str(prefix)}
    r = subprocess.run(["node", str(script)], env=full_env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in r.stdout.splitlines() if line.startswith("@@")]
    assert r.returncode == 0 and lines, f"JS SDK script failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return dict(json.loads(lines[-1][2:]))
