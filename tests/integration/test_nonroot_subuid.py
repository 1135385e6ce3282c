"""The normal-user path of uid ranges: a user with a real /etc/subuid and /etc/subgid entry gets
its subordinate range mapped inside an image sandbox by newuidmap/newgidmap (userns.user_mapping),
so root inside can add users and chown to them, and the sandbox's fork and snapshot carry those
owners. Run as ``nobody`` (65534) with a range added to /etc/subuid and /etc/subgid for the test
only: the files are restored byte for byte afterwards (or removed, when there were none), under
a lock so two runs of this test never edit them at once."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.image_roots import busybox_root, shared_dir
from tests.integration.test_nonroot import NOBODY, _as_nobody, _python_for, _stop, nobody_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="adding a /etc/subuid entry for another user needs root")
BASE = 3_000_000_000  # far above the host uids hutch gives root's sandboxes (uid_base 600000 + ranges of 65536)
COUNT = 65536
LOCK = Path("/tmp/hutch-test-subuid.lock")


@contextlib.contextmanager
def _entry(path: Path, line: str) -> Iterator[None]:
    before = path.read_bytes() if path.exists() else None
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    try:
        text = (before or b"").decode()
        path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line)
        os.chmod(path, mode)
        yield
    finally:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before)
            os.chmod(path, mode)


@pytest.fixture
def subuid() -> Iterator[int]:
    """``nobody`` has uids and gids BASE..BASE+65535 as its subordinate range."""
    LOCK.touch(exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        line = f"nobody:{BASE}:{COUNT}\n"
        with _entry(Path("/etc/subuid"), line), _entry(Path("/etc/subgid"), line):
            yield BASE
    finally:
        os.close(fd)


def test_an_image_sandbox_of_a_user_with_a_subuid_range(nobody_env: tuple[dict[str, str], Path], subuid: int) -> None:  # noqa: F811
    env, home = nobody_env
    py = _python_for(NOBODY)
    base = shared_dir("hutch-subuid-image-")
    root = busybox_root(base / "busybox")
    for top, dirs, files in os.walk(root):  # the user's own root filesystem
        for name in [".", *dirs, *files]:
            os.lchown(os.path.join(top, name), NOBODY, NOBODY)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [py, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=300, preexec_fn=_as_nobody
        )

    def sh(sandbox: str, script: str) -> str:
        r = cli("exec", "--json", sandbox, "--", "sh", "-c", script)
        out = json.loads(r.stdout)
        assert out.get("exit_code") == 0, (script, out)
        return str(out["stdout"])

    try:
        r = cli("image", "import", f"rootfs:{root}", "mine:1", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        r = cli("create", "--image", "mine:1", "--name", "img", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        info = json.loads(r.stdout)
        add_bob = "echo 'bob:x:1001:1001::/home/bob:/bin/sh' >> /etc/passwd && echo 'bob:x:1001:' >> /etc/group"  # useradd's work
        made = sh(
            "img", f"id -u; {add_bob} && mkdir -p /home/bob /x && chown bob:bob /home/bob /x && stat -c '%u:%g %U' /x /home/bob"
        )
        assert made.split("\n")[:3] == ["0", "1001:1001 bob", "1001:1001 bob"], made
        assert sh("img", "su bob -c 'id -u; touch /tmp/by-bob' && stat -c %U /tmp/by-bob").split() == ["1001", "bob"]
        # on the host: inside uid 1001 is the range's 1001st uid (0 is the user itself)
        upper = home / "sandboxes" / info["id"] / "root" / "upper"
        st = (upper / "x").stat()
        assert (st.st_uid, st.st_gid) == (subuid + 1000, subuid + 1000)
        assert (upper / "etc" / "passwd").stat().st_uid == NOBODY

        forked = cli("fork", "img", "--json")
        assert forked.returncode == 0, forked.stdout + forked.stderr
        kid = json.loads(forked.stdout)["children"][0]["sandbox"]
        assert sh(kid, "stat -c '%u %U' /x /home/bob; id -u bob").split() == ["1001", "bob", "1001", "bob", "1001"]

        saved = cli("snapshot", "save", "img", "with-bob", "--json")
        assert saved.returncode == 0, saved.stdout + saved.stderr
        restored = cli("snapshot", "restore", "with-bob", "--name", "back", "--json")
        assert restored.returncode == 0, restored.stdout + restored.stderr
        assert sh("back", "stat -c '%u %U' /x; su bob -c 'echo hi > /x/f' && stat -c %u /x/f").split() == ["1001", "bob", "1001"]
        for name in (kid, "back", "img"):
            assert cli("destroy", name).returncode == 0
        assert not upper.exists()
    finally:
        _stop(cli, home)
        subprocess.run(["rm", "-rf", str(home.parent), str(base)], check=False)
