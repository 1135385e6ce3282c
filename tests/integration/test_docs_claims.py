"""What the docs say and cannot be generated, checked against the real thing (a real
daemon, real bwrap sandboxes): reading a directory is `invalid` (cli.md, sdk.md), and as
root a mounted regular file needs o+r, so a 0644 file mounts (security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests.conftest import ROOT, Daemon, hutch_env

from hutch import Sandbox
from hutch.errors import InvalidError


def test_reading_a_directory_is_invalid_as_documented(daemon: Daemon) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    with pytest.raises(InvalidError) as err:
        sbx.files.read("/workspace")
    assert "hutch ls" in (err.value.hint or "")
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "read", sbx.id, "/workspace", "--json"],
        env=hutch_env(daemon.home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid"
    read_section = (ROOT / "docs" / "cli.md").read_text().split("\n## hutch read\n", 1)[1].split("\n## ", 1)[0]
    assert "2 usage or `invalid` (a\ndirectory" in read_section


def test_a_file_cut_at_64_mib_fails_the_read_as_documented(daemon: Daemon, tmp_path: Path) -> None:
    sbx = Sandbox.create(settings=daemon.settings)
    sbx.exec("head -c 67108865 /dev/zero > /tmp/big && echo x > /tmp/small")
    with open(tmp_path / "out", "wb") as out:
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "read", sbx.id, "/tmp/big"],
            env=hutch_env(daemon.home),
            stdout=out,
            stderr=subprocess.PIPE,
            text=False,
            timeout=300,
        )
    assert r.returncode == 1 and (tmp_path / "out").stat().st_size == 64 << 20
    assert b"larger than 64 MiB" in r.stderr and b"hutch exec" in r.stderr
    small = subprocess.run(
        [sys.executable, "-m", "hutch", "read", sbx.id, "/tmp/small"],
        env=hutch_env(daemon.home),
        capture_output=True,
        timeout=120,
    )
    assert (small.returncode, small.stdout, small.stderr) == (0, b"x\n", b"")
    read_section = (ROOT / "docs" / "cli.md").read_text().split("\n## hutch read\n", 1)[1].split("\n## ", 1)[0]
    assert "a file cut at 64 MiB" in read_section and "exits 1" in read_section
    with pytest.raises(InvalidError) as err:  # the SDK never returns a cut copy either
        sbx.files.read("/tmp/big")
    assert "larger than 64 MiB" in err.value.message and "exec(['cat'" in (err.value.hint or "")
    assert sbx.files.read("/tmp/small") == b"x\n"
    sbx.destroy()


def test_a_mounted_file_needs_read_for_others_as_documented(daemon: Daemon) -> None:
    base = Path(tempfile.mkdtemp(prefix="hutch-mnt-"))
    os.chmod(base, 0o755)
    shared, private = base / "shared.txt", base / "private.txt"
    for path, mode in ((shared, 0o644), (private, 0o600)):
        path.write_text(path.name)
        os.chmod(path, mode)
    try:
        sbx = Sandbox.create(mounts=[f"{shared}:/mnt/shared.txt:ro"], settings=daemon.settings)
        assert sbx.exec(["cat", "/mnt/shared.txt"]).stdout == "shared.txt"  # 0644 mounts
        if os.geteuid() == 0:  # as root the sandbox runs as an unprivileged uid: 0600 is refused
            with pytest.raises(InvalidError) as err:
                Sandbox.create(mounts=[f"{private}:/mnt/private.txt:ro"], settings=daemon.settings)
            assert "chmod o+r" in (err.value.hint or "")
        else:  # without root the sandbox has your uid: your own 0600 file mounts
            mine = Sandbox.create(mounts=[f"{private}:/mnt/private.txt:ro"], settings=daemon.settings)
            assert mine.exec(["cat", "/mnt/private.txt"]).stdout == "private.txt"
        text = " ".join((ROOT / "docs" / "security.md").read_text().split())
        assert "a mounted file needs `o+r` (a `0644` file mounts; a `0600` one is refused" in text
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
