"""Sandboxes with their own users (--user): a range of 65,536 host uids of their own mapped inside,
root inside with capabilities only there, nested user namespaces off; tried from inside."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep

from hutch.client import Client
from hutch.errors import InvalidError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ranges of host uids are handed out by a root daemon")

RANGE = 65536


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    return tmp_path / "uids"


@pytest.fixture
def root_daemon(registry: Path) -> Iterator[Daemon]:
    base = 30_000_000 + random.randrange(1000) * 1_000_000  # a pool of its own (concurrent runs of the suite)
    home = Path(tempfile.mkdtemp(prefix="hutch-userns-"))
    d = Daemon(home, HUTCH_UID_REGISTRY=str(registry), HUTCH_UID_BASE=str(base)).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def entries(registry: Path) -> dict[str, dict[str, int]]:
    return {e["sandbox"]: e for e in json.loads((registry / "registry.json").read_text())["entries"]}


def sh(c: Client, sid: str, script: str) -> dict[str, object]:
    return dict(c.exec(sid, {"command": ["/bin/sh", "-c", script]}))


def test_root_inside_is_a_range_of_unprivileged_host_uids(root_daemon: Daemon, registry: Path, tmp_path: Path) -> None:
    secret_dir = Path(tempfile.mkdtemp(prefix="hutch-userns-secret-"))
    os.chmod(secret_dir, 0o755)
    (secret_dir / "secret").write_text("host root only\n")
    os.chmod(secret_dir / "secret", 0o600)
    try:
        with root_daemon.client() as c:
            rec = c.create({"provider": "local", "user": "root", "mounts": [{"source": str(secret_dir), "target": "/host"}]})
            sid = str(rec["id"])
            entry = entries(registry)[sid]
            base = entry["start"]
            assert entry["count"] == RANGE

            r = sh(c, sid, "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map; grep CapEff /proc/self/status")
            assert r["exit_code"] == 0, r
            lines = str(r["stdout"]).splitlines()
            assert lines[:2] == ["0", "0"]
            assert lines[2].split() == ["0", str(base), str(RANGE)]
            assert lines[3].split() == ["0", str(base), str(RANGE)]
            assert int(lines[4].split()[1], 16) != 0  # root inside holds capabilities, over its namespace only

            # files made by root inside belong to the range's first uid on the host, a chown to a user of
            # the image to the matching uid of the range: never host root
            r = sh(c, sid, "touch /workspace/by-root /workspace/for-bob && chown 1000:1000 /workspace/for-bob")
            assert r["exit_code"] == 0, r
            ws = root_daemon.home / "sandboxes" / sid / "workspace"
            assert (ws / "by-root").stat().st_uid == base and (ws / "by-root").stat().st_gid == base
            assert (ws / "for-bob").stat().st_uid == base + 1000

            # root inside is nobody to the host: a host root's 0600 file stays closed, whatever its capabilities
            r = sh(c, sid, "cat /host/secret")
            assert r["exit_code"] != 0 and "Permission denied" in str(r["stderr"]), r
            r = sh(c, sid, "stat -c %u /host/secret")
            assert str(r["stdout"]).strip() == "65534", r  # host root is not mapped inside

            # a setuid-root program made inside grants root of the namespace at most, and not even that:
            # bwrap sets no_new_privs, so it runs as whoever started it
            r = sh(
                c,
                sid,
                "cp /usr/bin/id /workspace/suid-id && chmod 4755 /workspace/suid-id && "
                "setpriv --reuid=1000 --regid=1000 --clear-groups /workspace/suid-id -u",
            )
            assert r["exit_code"] == 0, r
            assert str(r["stdout"]).strip() == "1000", r
            st = (ws / "suid-id").stat()
            assert st.st_uid == base and st.st_mode & 0o4000  # setuid to the range's first uid, not host root
    finally:
        subprocess.run(["rm", "-rf", str(secret_dir)], check=False)


def test_nested_user_namespaces_stay_off_and_the_map_is_fixed(root_daemon: Daemon) -> None:
    with root_daemon.client() as c:
        sid = str(c.create({"provider": "local", "user": "root"})["id"])
        r = sh(c, sid, "unshare -U true")
        assert r["exit_code"] != 0, r
        r = sh(c, sid, "unshare -Ur true")
        assert r["exit_code"] != 0, r
        # clone(CLONE_NEWUSER) is not refused by seccomp: the namespace's own limit stops it
        nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]  # clone(CLONE_NEWUSER | SIGCHLD)
        clone = (
            "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
            f"pid = libc.syscall({nr}, 0x10000000 | 17, 0, 0, 0, 0); "
            "os._exit(0) if pid == 0 else print(pid, ctypes.get_errno())"
        )
        r = c.exec(sid, {"command": ["python3", "-c", clone]})
        assert r["exit_code"] == 0, r
        pid, err = str(r["stdout"]).split()
        assert pid == "-1" and int(err) != 0, r
        r = sh(c, sid, "cat /proc/sys/user/max_user_namespaces; echo 5 > /proc/sys/user/max_user_namespaces")
        assert str(r["stdout"]).splitlines()[0] == "0" and r["exit_code"] != 0, r
        for file in ("uid_map", "gid_map"):
            r = sh(c, sid, f"echo '0 0 1' > /proc/self/{file}")
            assert r["exit_code"] != 0, r
        r = sh(c, sid, "cat /proc/self/uid_map")
        assert str(r["stdout"]).split()[1] != "0"


def test_users_of_a_sandbox_and_bad_users(root_daemon: Daemon, registry: Path) -> None:
    with root_daemon.client() as c:
        sid = str(c.create({"provider": "local", "user": "1000:100"})["id"])
        r = sh(c, sid, "id -u; id -g; grep CapEff /proc/self/status; touch /workspace/mine && echo ok")
        assert str(r["stdout"]).split()[:2] == ["1000", "100"], r
        assert str(r["stdout"]).split()[3] == "0000000000000000", r  # no capability left at all
        assert str(r["stdout"]).split()[-1] == "ok", r
        base = entries(registry)[sid]["start"]
        mine = root_daemon.home / "sandboxes" / sid / "workspace" / "mine"
        assert (mine.stat().st_uid, mine.stat().st_gid) == (base + 1000, base + 100)

        with pytest.raises(InvalidError, match="uid 70000 is outside the 65536 uids mapped"):
            c.create({"provider": "local", "user": "70000"})
        with pytest.raises(InvalidError, match="no user 'nosuchuser'"):
            c.create({"provider": "local", "user": "nosuchuser"})
        assert set(entries(registry)) == {sid}  # a refused create keeps no range
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "create", "--user", "root:x y", "--json"],
        env=root_daemon.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid", r


def test_ranges_are_disjoint_released_on_destroy_and_survive_a_daemon_kill(root_daemon: Daemon, registry: Path) -> None:
    with root_daemon.client() as c:
        a = str(c.create({"provider": "local", "user": "root"})["id"])
        b = str(c.create({"provider": "local", "user": "root"})["id"])
        plain = str(c.create({"provider": "local"})["id"])
    held = entries(registry)
    ra, rb = (held[a]["start"], held[a]["start"] + held[a]["count"]), (held[b]["start"], held[b]["start"] + held[b]["count"])
    assert ra[1] <= rb[0] or rb[1] <= ra[0], (ra, rb)
    assert not ra[0] <= held[plain]["start"] < ra[1] and not rb[0] <= held[plain]["start"] < rb[1]

    root_daemon.kill9()
    assert set(entries(registry)) == {a, b, plain}  # kept while the sandboxes live, whatever became of the daemon
    root_daemon.start()
    with root_daemon.client() as c:
        r = sh(c, a, "cat /proc/self/uid_map; touch /workspace/after")
        assert r["exit_code"] == 0 and str(r["stdout"]).split()[1] == str(ra[0]), r
        c.destroy(a)
        assert set(entries(registry)) == {b, plain}
        again = str(c.create({"provider": "local", "user": "root"})["id"])
    assert entries(registry)[again]["count"] == RANGE
