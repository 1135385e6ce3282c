"""The E2B API's processes outlive a daemon restart: a background command started through
the official SDK is listed, connected to (its output from then on, its exit code) and killed
by its pid through a new daemon on the same state directory; new pids do not reuse old ones."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from tests.conftest import destroy_all, sweep
from tests.integration.e2b_sdk import run_sdk, sdk_python
from tests.integration.test_remote import RemoteDaemon

from hutch.server.e2b.auth import hutch_id

pytestmark = pytest.mark.integration


def _env(d: RemoteDaemon, key: str) -> dict[str, str]:
    return {"E2B_API_KEY": key, "E2B_API_URL": d.url + "/e2b/api", "E2B_SANDBOX_URL": d.url + "/e2b/envd"}


def test_connect_list_and_kill_by_pid_after_a_daemon_restart() -> None:
    python = sdk_python()
    home = Path(tempfile.mkdtemp(prefix="hutch-e2b-rs-"))
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0").start()
    try:
        key = d.client().create_key({"name": "alice"})["key"]
        before = run_sdk(
            python,
            _env(d, key),
            """
            from e2b import Sandbox
            sbx = Sandbox.create(timeout=600)
            out["id"] = sbx.sandbox_id
            h = sbx.commands.run("echo first; until [ -e /workspace/go ]; do sleep 0.2; done; echo done; exit 4", background=True)
            k = sbx.commands.run("sleep 600", background=True)
            out["pids"] = [h.pid, k.pid]
            """,
        )
        d.stop()
        d = RemoteDaemon(home, "--listen", "127.0.0.1:0").start()
        ticker, sleeper = before["pids"]
        after = run_sdk(
            python,
            _env(d, key),
            f"""
            from e2b import Sandbox, CommandExitException
            sbx = Sandbox.connect({before["id"]!r})
            out["listed"] = sorted(p.pid for p in sbx.commands.list())
            h = sbx.commands.connect({ticker})
            sbx.files.write("/workspace/go", "")  # now it ends, once connected again
            try:
                h.wait()
            except CommandExitException as exc:
                out["end"] = [exc.exit_code, exc.stdout]
            out["killed"] = sbx.commands.kill({sleeper})
            try:
                sbx.commands.connect({sleeper}).wait()  # its end, once the kill has landed
            except CommandExitException as exc:
                out["sleeper_end"] = exc.exit_code
            out["listed_after"] = sorted(p.pid for p in sbx.commands.list())
            out["new_pid"] = sbx.commands.run("true", background=True).pid
            """,
        )
        runs = [(r["command"][-1][:30], r["status"], r.get("error")) for r in d.client().runs(hutch_id(before["id"]))]
        assert after["listed"] == sorted(before["pids"]), runs
        code, stdout = after["end"]
        assert code == 4 and stdout == "done\n", stdout  # what it printed from then on
        assert after["killed"] is True and ticker not in after["listed_after"] and sleeper not in after["listed_after"]
        assert after["new_pid"] > max(before["pids"]) and after["sleeper_end"] != 0
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            shutil.rmtree(home, ignore_errors=True)
