"""hutch exec and hutch run, run for real against a daemon, import only what they need."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.conftest import Daemon, hutch_env
from tests.unit.test_cli_imports import PLAIN_EXEC_FREE, PLAIN_FREE, RUN_CALL_FREE, banned

PROBE = (  # (the probe imports nothing of its own before the command: sys and os are loaded at start)
    "import sys, os\n"
    "from hutch.cli import main\n"
    "code = main(sys.argv[2:])\n"
    "os.write(int(sys.argv[1]), repr(sorted(sys.modules)).encode())\n"
    "raise SystemExit(code)\n"
)


def _modules(daemon: Daemon, *argv: str) -> list[str]:
    """The modules a CLI process had loaded when the command was done."""
    r, w = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, str(w), *argv],
            env=hutch_env(daemon.home),
            capture_output=True,
            pass_fds=(w,),
            timeout=120,
        )
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    assert proc.returncode == 0, proc.stderr.decode()
    return list(ast.literal_eval(data.decode()))


def test_hutch_exec_and_run_import_no_event_loop_tls_or_http_client(daemon: Daemon) -> None:
    with daemon.client() as c:
        sbx = c.create({"provider": "local"})["id"]
    for argv in (("exec", sbx, "--", "true"), ("run", "--", "true")):
        loaded = _modules(daemon, *argv)
        assert banned(loaded, RUN_CALL_FREE) == [], argv
        assert "hutch.client.http1" in loaded
        # the plain forms run without the command tree (click), nor dataclasses (the settings and
        # the endpoint are plain classes), nor what only some calls need: a time to parse, a
        # refused request's jitter
        assert banned(loaded, ("click", "dataclasses", "datetime", "random")) == [], argv
        # nor typing, re, enum, json, pathlib, socket.py ... (two thirds of their start were these)
        assert banned(loaded, PLAIN_EXEC_FREE if argv[0] == "exec" else PLAIN_FREE) == [], argv
    for argv in (("exec", "--cwd", "/workspace", sbx, "--", "true"), ("run", "--memory", "512M", "--", "true")):
        loaded = _modules(daemon, *argv)  # with an option: the command tree
        assert "click" in loaded and banned(loaded, RUN_CALL_FREE) == [], argv


def test_the_installed_hutch_command_imports_nothing_more(daemon: Daemon) -> None:
    """The ``hutch`` command an install puts beside the interpreter (bin/hutch: a plain script, not
    the console-script wrapper, which imports re and enum) keeps the plain path's start."""
    script = os.path.join(os.path.dirname(sys.executable), "hutch")
    assert os.path.exists(script), "install hutch (pip install -e '.[test]') to run its tests"
    with daemon.client() as c:
        sbx = c.create({"provider": "local"})["id"]
    for argv in (("exec", sbx, "--", "true"), ("run", "--", "true")):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", script, *argv],
            env=hutch_env(daemon.home),
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        lines = proc.stderr.decode().splitlines()
        loaded = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
        assert "hutch.cli" in loaded and not {"re", "enum", "typing", "json"} & loaded, argv
