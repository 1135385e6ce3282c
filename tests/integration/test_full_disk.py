"""A full disk is a clear error, and loses nothing: the sandbox and its records survive."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch import HutchError, Sandbox


@pytest.fixture
def small_home() -> Iterator[Path]:
    assert os.geteuid() == 0, "this test mounts a small tmpfs; the suite runs as root in CI"
    home = Path(tempfile.mkdtemp(prefix="hutch-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0711", "tmpfs", str(home)], check=True)
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)
        home.rmdir()


def test_full_workspace_disk(small_home: Path) -> None:
    d = Daemon(small_home).start()
    try:
        sbx = Sandbox.create(settings=d.settings)
        with pytest.raises(HutchError) as err:
            sbx.files.write("big.bin", b"\0" * (8 << 20))
        assert err.value.kind == "capacity"
        assert "free space" in (err.value.hint or "")
        assert sbx.files.list() == []  # no partial file left behind
        # the workload fills the disk: it sees ENOSPC, and its result still comes back
        r = sbx.exec("head -c 8M /dev/zero > fill.bin; echo rc=$?")
        assert "rc=1" in r.stdout and "No space left" in r.stderr
        # with the disk full, hutch refuses to start a run it could not record, and says why
        with pytest.raises(HutchError) as err:
            sbx.exec("true")
        assert err.value.kind == "unavailable" and "full" in err.value.message
        assert "disk" in (err.value.hint or "")
        (small_home / "sandboxes" / sbx.id / "workspace" / "fill.bin").unlink()  # space freed on the host
        assert sbx.exec("echo still here").stdout == "still here\n"
        statuses = [run["status"] for run in sbx.client.runs(sbx.id)]
        assert statuses[-1] == "completed" and "lost" not in statuses[-1:]
        destroy_all(small_home)
        assert list((small_home / "sandboxes").iterdir()) == []
    finally:
        try:
            destroy_all(small_home)
        finally:
            d.stop()
            sweep(small_home)
