"""Manifests against a real daemon: create, run and warmup with --manifest (seeded files,
setup commands with their output in the events, secrets read from references), flags over
the file, a sandbox made again from ``hutch manifest show``, the SDK (sync and async) and
the MCP tools, a failing setup leaving no sandbox, and the current directory's manifest
used only when asked."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon
from tests.integration.test_mcp import ok, run

from hutch import AsyncSandbox, Sandbox

MANIFEST = """\
name = "mf"
setup = ["cat greeting.txt", "echo to-stderr >&2; echo $TOKEN", ["sh", "-c", "test -f .env && echo env-seeded"]]
require_approval = ["network.change"]
ttl = "2h"
pass_env = ["HUTCH_T_PASSED"]

[limits]
memory = "256M"
pids = 64

[env]
MODE = "manifest"

[labels]
from = "manifest"

[secrets]
TOKEN = "env:HUTCH_T_TOKEN"

[network]
hosts = ["api.example.com"]
ports = [443]

[[files]]
path = "greeting.txt"
content = "hello from the manifest\\n"

[[files]]
path = "/workspace/.env"
content = "A=1\\n"
mode = "600"
"""
ENV = {"HUTCH_T_TOKEN": "tok-s3cr3t-value", "HUTCH_T_PASSED": "passed"}


def cli(d: Daemon, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env={**d.env, **ENV, **env}, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def created(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def setup_events(d: Daemon, sid: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return [e["data"] for e in c.events(sid) if e["type"] == "setup_command"]


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "hutch.toml"
    path.write_text(MANIFEST)
    return path


def test_create_from_a_manifest_and_again_from_its_show(daemon: Daemon, manifest: Path, tmp_path: Path) -> None:
    rec = created(cli(daemon, "create", "--json", "--manifest", str(manifest), "--label", "extra=flag", "--pids", "100"))
    spec, sid = rec["spec"], rec["id"]
    assert rec["name"] == "mf" and spec["limits"]["memory"] == 256 << 20 and spec["limits"]["pids"] == 100
    assert spec["labels"] == {"from": "manifest", "extra": "flag"} and spec["secret_names"] == ["TOKEN"]
    assert spec["network"]["allow_hosts"] == ["api.example.com"] and spec["require_approval"] == ["network.change"]
    assert rec["expires_at"] and sorted(spec["env"]) == ["HUTCH_T_PASSED", "MODE"]
    steps = setup_events(daemon, sid)
    assert [(s["index"], s["exit_code"], s["stdout"], s["stderr"]) for s in steps] == [
        (0, 0, "hello from the manifest", ""),
        (1, 0, "[redacted:TOKEN]", "to-stderr"),
        (2, 0, "env-seeded", ""),
    ]
    r = cli(daemon, "exec", sid, "--", "sh", "-c", 'stat -c %a .env; echo "$MODE $HUTCH_T_PASSED"')
    assert r.stdout == "600\nmanifest passed\n"

    shown = cli(daemon, "manifest", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "tok-s3cr3t" not in shown.stdout and 'TOKEN = "env:HUTCH_T_TOKEN"' in shown.stdout
    # the store keeps no environment values (they may be secrets): they come back as pass_env
    assert 'pass_env = ["HUTCH_T_PASSED", "MODE"]' in shown.stdout and "[env]" not in shown.stdout
    # the same sandbox again, from the manifest of the live one (bash: a process substitution)
    hutch = f"{sys.executable} -m hutch"
    again = subprocess.run(
        ["bash", "-c", f"{hutch} create --json --name mf2 --manifest <({hutch} manifest show mf)"],
        env={**daemon.env, **ENV, "MODE": "manifest"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert {**created(again)["spec"], "name": "mf"} == spec
    # and from a kept copy once it is gone
    assert cli(daemon, "destroy", sid).returncode == 0
    kept = tmp_path / "shown.toml"
    kept.write_text(shown.stdout)
    rec2 = created(cli(daemon, "create", "--json", "--manifest", str(kept), MODE="manifest"))
    assert rec2["spec"] == spec
    assert [s["stdout"] for s in setup_events(daemon, rec2["id"])] == [s["stdout"] for s in steps]


def test_manifest_show_of_a_file_is_checked_and_merged(daemon: Daemon, manifest: Path) -> None:
    r = cli(daemon, "manifest", "show", "--json", str(manifest))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["limits"] == {"memory": "256M", "pids": 64} and doc["provider"] == "local"
    assert doc["pass_env"] == ["HUTCH_T_PASSED"] and doc["secrets"] == {"TOKEN": "env:HUTCH_T_TOKEN"}
    manifest.write_text(MANIFEST.replace('"env:HUTCH_T_TOKEN"', '"tok-inline"'))
    r = cli(daemon, "manifest", "show", str(manifest))
    assert r.returncode == 2 and f"{manifest}:18: secrets.TOKEN: inline secret values are refused" in r.stderr
    assert "tok-inline" not in r.stderr


def test_a_failing_setup_command_leaves_no_sandbox(daemon: Daemon, tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('setup = ["echo ok", "echo broken-step >&2; exit 3", "echo never"]\n')
    r = cli(daemon, "create", "--manifest", str(path))
    assert r.returncode != 0 and "setup command 2" in r.stderr and "exited with 3: broken-step" in r.stderr
    with daemon.client() as c:
        assert c.list() == []
        gone = c.list(include_all=True)[-1]
        assert gone["state"] == "destroyed"
        types = [e["type"] for e in c.events(gone["id"])]
    assert types.count("setup_command") == 2 and "sandbox_setup_failed" in types and "sandbox_destroyed" in types


def test_run_and_warmup_take_a_manifest(daemon: Daemon, manifest: Path) -> None:
    r = cli(daemon, "run", "--manifest", str(manifest), "--name", "mf-run", "--", "sh", "-c", "cat greeting.txt; echo $MODE")
    assert r.returncode == 0 and r.stdout == "hello from the manifest\nmanifest\n", r.stderr
    rec = created(cli(daemon, "warmup", "--json", "--manifest", str(manifest), "--name", "mf-warm"))
    assert rec["spec"]["labels"] == {"from": "manifest"}


def test_the_current_directory_manifest_is_used_only_when_asked(daemon: Daemon, tmp_path: Path) -> None:
    (tmp_path / "hutch.toml").write_text(
        'name = "cloned"\n[network]\nmode = "open"\n[[mounts]]\nsource = "/etc"\ntarget = "/hostetc"\n[secrets]\nX = "env:HOME"\n'
    )
    rec = created(cli(daemon, "create", "--json", cwd=tmp_path))
    assert rec["name"] is None and rec["spec"]["network"]["mode"] == "none" and rec["spec"]["mounts"] == []
    assert rec["spec"]["secret_names"] == []
    r = cli(daemon, "create", cwd=tmp_path, HUTCH_MANIFEST="hutch.toml")
    assert r.returncode == 2 and "cannot declare" in r.stderr and "--manifest hutch.toml" in r.stderr
    (tmp_path / "hutch.toml").write_text('name = "cloned"\nsetup = ["echo set up"]\n')
    rec = created(cli(daemon, "create", "--json", cwd=tmp_path, HUTCH_MANIFEST="hutch.toml"))
    assert rec["name"] == "cloned"
    (tmp_path / "hutch.toml").write_text('name = "asked"\n[network]\nmode = "open"\n')
    rec = created(cli(daemon, "create", "--json", "--manifest", cwd=tmp_path))
    assert rec["name"] == "asked" and rec["spec"]["network"]["mode"] == "open"


def test_the_sdk_takes_a_manifest_sync_and_async(daemon: Daemon, manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    with Sandbox.create(manifest=str(manifest), name="mf-sdk", memory="300M", settings=daemon.settings) as sbx:
        assert sbx.info["spec"]["limits"]["memory"] == 300 << 20
        assert sbx.exec("cat greeting.txt").stdout == "hello from the manifest\n"

    async def main() -> None:
        box = await AsyncSandbox.create(manifest=str(manifest), name="mf-async", settings=daemon.settings)
        try:
            assert (await box.exec("echo $MODE")).stdout == "manifest\n"
        finally:
            await box.destroy()

    asyncio.run(main())
    result = Sandbox.run_once("cat greeting.txt", manifest=str(manifest), name="mf-once", settings=daemon.settings)
    assert result.stdout == "hello from the manifest\n"


def test_the_mcp_tools_take_a_manifest(daemon: Daemon, tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('name = "mf-mcp"\nsetup = ["echo seeded > out.txt"]\n[env]\nMODE = "mcp"\n')

    async def body(c: Any) -> None:
        rec = ok(await c.call_tool("sandbox_create", {"manifest": str(path), "memory": "300M"}))
        assert rec["name"] == "mf-mcp" and rec["spec"]["limits"]["memory"] == 300 << 20
        out = ok(await c.call_tool("exec", {"sandbox": "mf-mcp", "command": "cat out.txt; echo $MODE"}))
        assert out["stdout"] == "seeded\nmcp\n"
        ok(await c.call_tool("sandbox_destroy", {"sandbox": "mf-mcp"}))
        done = ok(await c.call_tool("run", {"command": "cat out.txt", "manifest": str(path)}))
        assert done["stdout"] == "seeded\n" and done["destroyed"]

    run(daemon, body)


def test_a_manifest_binds_placeholder_secrets(daemon: Daemon, tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        '[secrets]\nAPI = "env:HUTCH_T_TOKEN"\n[secret_hosts]\nAPI = ["api.example.com"]\n'
        '[network]\nhosts = ["api.example.com"]\n'
    )
    rec = created(cli(daemon, "create", "--json", "--manifest", str(path)))
    assert rec["spec"]["secret_hosts"] == {"API": ["api.example.com"]}
    r = cli(daemon, "exec", "--no-redact", rec["id"], "--", "sh", "-c", "echo $API")
    assert r.stdout.startswith("hutch-secret-API-") and ENV["HUTCH_T_TOKEN"] not in r.stdout
    shown = cli(daemon, "manifest", "show", rec["id"]).stdout
    assert 'API = ["api.example.com"]' in shown and 'API = "env:HUTCH_T_TOKEN"' in shown
