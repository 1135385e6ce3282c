"""The host python3 the in-sandbox agent runs under: checked by doctor and at create,
and the agent's code written and type-checked for the oldest one supported."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.errors import UnavailableError
from hutch.models import SandboxRecord, SandboxSpec
from hutch.providers.local import LocalProvider, hostpython
from hutch.providers.local.agent import wire

AGENT = Path(wire.__file__).parent


def _fake_python(tmp_path: Path, version: str) -> str:
    path = tmp_path / "python3"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return str(path)


def test_a_too_old_python_is_refused_with_the_fix(tmp_path: Path) -> None:
    old = _fake_python(tmp_path, "3 9 2")
    with pytest.raises(UnavailableError) as err:
        hostpython.checked(old)
    assert "Python 3.9.2" in err.value.message and "3.10 or newer" in err.value.message
    assert "install Python 3.10" in (err.value.hint or "")


def test_the_oldest_supported_python_passes() -> None:
    assert hostpython.MIN_VERSION == (3, 10)
    assert hostpython.version(sys.executable) >= hostpython.MIN_VERSION
    path, _ = hostpython.find()
    assert hostpython.checked(path) >= (3, 10)


def test_doctor_and_create_check_the_agents_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _fake_python(tmp_path, "3 8 10")
    monkeypatch.setattr(hostpython, "find", lambda: (old, None))
    provider = LocalProvider(Settings.load(home=tmp_path / "home", uid_registry=str(tmp_path / "uids")))
    checks = {c.name: c for c in asyncio.run(provider.check())}
    assert not checks["python"].ok and "3.8.10" in checks["python"].detail
    assert "install Python 3.10" in (checks["python"].fix or "")
    rec = SandboxRecord(id="sbx_oldpython", provider="local", state="creating", spec=SandboxSpec(), created_at=0, updated_at=0)
    with pytest.raises(UnavailableError) as err:
        asyncio.run(provider.create(rec))
    assert "3.8.10" in err.value.message
    assert not (tmp_path / "home" / "sandboxes" / rec.id).exists()  # refused before anything was made


def test_the_agent_is_written_for_the_oldest_supported_python() -> None:
    for path in sorted(AGENT.glob("*.py")):
        ast.parse(path.read_text(), str(path), feature_version=hostpython.MIN_VERSION)


def test_the_agent_type_checks_for_the_oldest_supported_python() -> None:
    from mypy import api  # the dev tools: mypy is in the test extra

    version = ".".join(map(str, hostpython.MIN_VERSION))
    out, err, status = api.run(["--strict", "--python-version", version, "--no-incremental", str(AGENT)])
    assert status == 0, out + err


def test_the_agent_is_compiled_once_for_its_python_and_that_bytecode_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hutch.providers.local import AGENT_FILES

    monkeypatch.setattr(hostpython, "_known", {})
    agent = hostpython.prepare(AGENT_FILES, tmp_path / "cache")
    names = sorted(n.split("/")[1].split(".")[0] for n in agent.compiled)
    assert names == sorted(n[:-3] for n in AGENT_FILES if n != "__main__.py")
    # a second daemon finds it on disk: the interpreter is not asked again
    monkeypatch.setattr(hostpython, "_known", {})
    monkeypatch.setattr(hostpython, "_probe", lambda *a: pytest.fail("compiled again"))
    assert hostpython.prepare(AGENT_FILES, tmp_path / "cache") == agent
    # laid out as in a sandbox, the bytecode is what runs (unchecked: the source is not even read)
    pkg = tmp_path / "sandbox" / "agent"
    (pkg / "__pycache__").mkdir(parents=True)
    for name, data in (AGENT_FILES | agent.compiled).items():
        (pkg / name).write_bytes(data)
    (pkg / "server.py").write_text("raise SystemExit('the source was compiled')\n")
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import agent.server as m; print(m.main.__code__.co_filename)"
    out = subprocess.run([agent.path, "-I", "-S", "-B", "-c", probe, str(pkg.parent)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(pkg / "server.py")  # tracebacks name the file where it is
