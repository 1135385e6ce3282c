"""A state directory (HUTCH_HOME) that cannot work is said plainly, with what is in the way
and what to do: a file where the directory should be (or above it), a directory this user
cannot write, and, for a root daemon, a directory above it that sandboxes' own uids may not
enter (they start bwrap, which resolves the paths it binds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import hutch_env
from tests.integration.test_nonroot import NOBODY, _as_nobody, _python_for

from hutch.config import home_problem
from hutch.providers.local.host import closed_to_sandboxes


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-statedir-"))
    os.chmod(path, 0o755)
    yield path
    pid_file = next(iter(path.glob("**/hutchd.pid")), None)
    if pid_file is not None:
        subprocess.run([sys.executable, "-m", "hutch", "daemon", "stop"], env=hutch_env(pid_file.parent), check=False)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def nobody_path(base: Path) -> str:
    """sys.path as nobody can read it: a private directory's entries copied under ``base``."""
    out = []
    for i, entry in enumerate(p for p in sys.path if p and os.path.isdir(p)):
        path = Path(entry)
        if all(p.stat().st_mode & 0o005 == 0o005 for p in [path, *path.parents]):
            out.append(entry)
        elif entry.endswith(("site-packages", "src")):
            copy = base / f"lib{i}"
            shutil.copytree(path, copy, symlinks=True)
            out.append(str(copy))
    return os.pathsep.join(out)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hutch", *args]
    return subprocess.run(argv, env=hutch_env(home), capture_output=True, text=True, timeout=120)


def test_a_home_that_is_a_file_or_under_one_is_refused_saying_so(base: Path) -> None:
    afile = base / "afile"
    afile.write_text("not a directory\n")
    for home, said in (
        (afile, f"{afile} is a file, not a directory"),
        (afile / "sub", f"{afile} (in the path {afile / 'sub'}) is not a directory"),
    ):
        assert home_problem(str(home)) == said
        for args in (("list",), ("run", "--", "true"), ("create",)):
            r = cli(home, *args)
            assert r.returncode != 0, r.stdout
            assert f"cannot use the state directory {home}: {said}" in r.stderr, (args, r.stderr)
            assert "hint: set HUTCH_HOME to a directory this user can write" in r.stderr
            assert "Traceback" not in r.stderr and "cannot reach the hutch daemon" not in r.stderr
        r = cli(home, "create", "--json")
        error = json.loads(r.stdout)["error"]
        assert r.returncode != 0 and error["message"] == f"cannot use the state directory {home}: {said}", error
        doctor = cli(home, "doctor", "--json")
        assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert not checks["state dir"]["ok"] and said in checks["state dir"]["detail"], checks["state dir"]
    assert afile.read_text() == "not a directory\n"  # nothing was written over it
    assert home_problem(str(base / "new" / "deeper")) is None  # made on first use
    assert home_problem(str(base)) is None


def test_a_home_this_user_cannot_write_is_refused_saying_so(base: Path) -> None:
    """As an unprivileged user (nobody when the suite runs as root): a parent it cannot write."""
    closed = base / "closed"
    closed.mkdir(mode=0o755)  # root's (or this user's, then made read-only): nobody may not write in it
    if os.geteuid() != 0:
        closed.chmod(0o555)
    home = closed / "home"
    env = {"PATH": "/usr/bin:/bin", "HUTCH_HOME": str(home), "HOME": str(base), "PYTHONPATH": nobody_path(base)}
    pre = _as_nobody if os.geteuid() == 0 else None
    py = _python_for(NOBODY)
    probe = "from hutch.config import home_problem; import sys; print(home_problem(sys.argv[1]))"
    r = subprocess.run([py, "-c", probe, str(home)], env=env, capture_output=True, text=True, timeout=60, preexec_fn=pre)
    assert r.stdout.strip() == f"{closed} is not writable by this user, so {home} cannot be made in it", r.stdout + r.stderr
    r = subprocess.run([py, "-m", "hutch", "list"], env=env, capture_output=True, text=True, timeout=60, preexec_fn=pre)
    assert r.returncode != 0 and f"cannot use the state directory {home}: {closed} is not writable" in r.stderr, r.stderr
    assert not home.exists()


def test_a_root_daemon_under_a_directory_closed_to_others_says_which_and_how(base: Path) -> None:
    private = base / "private"
    private.mkdir(mode=0o700)
    home = private / "home"
    assert closed_to_sandboxes(home / "sandboxes") == private
    assert closed_to_sandboxes(base / "x") is None  # every directory above it may be entered
    r = cli(home, "run", "--", "echo", "hi")
    doctor = cli(home, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    if os.geteuid() != 0:  # a user's daemon starts bwrap as that user: nothing to open
        assert r.returncode == 0 and r.stdout == "hi\n", r.stderr
        assert checks["state dir reach"]["ok"]
        return
    assert r.returncode != 0
    assert f"its uid may not enter {private} (mode 0700), which holds the state directory" in r.stderr, r.stderr
    assert f"hint: chmod o+x {private}, or set HUTCH_HOME to a directory outside it" in r.stderr
    reach = checks["state dir reach"]
    assert not reach["ok"] and str(private) in reach["detail"] and reach["fix"].startswith(f"chmod o+x {private}")
    assert doctor.returncode == 1
    assert cli(home, "list", "--json").stdout.strip() == "[]"  # nothing was left half-made
    private.chmod(0o711)  # what the hint says
    r = cli(home, "run", "--", "echo", "hi")
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr
