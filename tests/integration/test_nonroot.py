"""hutch works for a normal user: the daemon, bwrap and the sandbox all unprivileged."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import hutch

NOBODY = 65534


def _world_reachable(path: Path) -> bool:
    return all(p.stat().st_mode & 0o005 == 0o005 for p in [path, *path.parents])


def _python_for(uid: int) -> str:
    """An interpreter of this Python's version that ``uid`` can execute."""
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        if os.path.exists(candidate) and _world_reachable(Path(candidate)):
            return candidate
    raise AssertionError(f"no Python {sys.version_info[:2]} that uid {uid} can run: install it system-wide")


@pytest.fixture
def nobody_env() -> tuple[dict[str, str], Path]:
    if os.geteuid() != 0:  # already unprivileged: the rest of the suite is the non-root path
        home = Path(tempfile.mkdtemp(prefix="hutch-user-"))
        return {**os.environ, "HUTCH_HOME": str(home)}, home
    base = Path(tempfile.mkdtemp(prefix="hutch-nobody-"))
    os.chmod(base, 0o755)
    paths = [str(Path(hutch.__file__).parent.parent), *site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    readable = []
    for i, p in enumerate(dict.fromkeys(paths)):
        if _world_reachable(Path(p)):
            readable.append(p)
        else:  # a checkout under a private directory: give the user its own copy
            copy = base / f"lib{i}"
            shutil.copytree(p, copy, symlinks=True)
            readable.append(str(copy))
    home = base / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    env = {"PATH": "/usr/bin:/bin", "HUTCH_HOME": str(home), "PYTHONPATH": ":".join(readable), "HOME": str(home)}
    return env, home


def _stop(cli: Callable[..., subprocess.CompletedProcess[str]], home: Path) -> None:
    """Destroy what the test made, then stop its daemon (a stopped daemon leaves sandboxes running)."""
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        cli("destroy", "--all")
    pid_file = home / "hutchd.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def _as_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def test_sandbox_as_unprivileged_user(nobody_env: tuple[dict[str, str], Path]) -> None:
    env, home = nobody_env
    py = _python_for(NOBODY)
    pre = _as_nobody if os.geteuid() == 0 else None

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([py, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=120, preexec_fn=pre)

    try:
        doctor = cli("doctor", "--json")
        report = json.loads(doctor.stdout)
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["bwrap"]["ok"], checks
        r = cli("create", "--name", "mine", "--memory", "256M", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        info = json.loads(r.stdout)
        if os.geteuid() == 0:
            # nobody cannot write cgroups here: the fallback is used and said
            assert "rlimit" in info["enforcement"]["memory"] or "cgroup" in info["enforcement"]["memory"]
        r = cli("exec", "--json", "mine", "--", "sh", "-c", "id -u; echo hi > f; cat /etc/shadow; ls /root")
        out = json.loads(r.stdout)
        assert out["stdout"].splitlines() == ["1000"]
        assert "No such file" in out["stderr"]
        host_file = home / "sandboxes" / info["id"] / "workspace" / "f"
        assert host_file.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
        sock = home / "hutchd.sock"
        assert sock.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        r = cli("exec", "mine", "--", "sh", "-c", "unshare -U true; echo $?")
        assert r.stdout.strip() == "1"
        # fork's copy runs unprivileged too, without cgroups, and carries an unreadable file
        assert cli("exec", "mine", "--", "sh", "-c", "echo kept > locked; chmod 000 locked").returncode == 0
        forked = cli("fork", "mine", "--json")
        assert forked.returncode == 0, forked.stdout + forked.stderr
        kid = json.loads(forked.stdout)["children"][0]["sandbox"]
        r = cli("exec", kid, "--", "sh", "-c", "stat -c %a locked; chmod 600 locked; cat locked")
        assert r.stdout.split() == ["0", "kept"], r.stdout + r.stderr
        assert cli("destroy", kid).returncode == 0
        assert cli("destroy", "mine").returncode == 0
        assert not host_file.exists()
    finally:
        _stop(cli, home)
        subprocess.run(["rm", "-rf", str(home.parent if os.geteuid() == 0 else home)], check=False)


def test_network_policy_as_unprivileged_user(nobody_env: tuple[dict[str, str], Path]) -> None:
    """The proxy's listener needs no privilege: the sandbox's agent makes it and hands it over."""
    import http.server
    import threading

    env, home = nobody_env
    py = _python_for(NOBODY)
    pre = _as_nobody if os.geteuid() == 0 else None

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    hosts = Path(tempfile.mkdtemp(prefix="hutch-hosts-")) / "hosts"
    hosts.write_text("127.0.0.1 up.test\n")
    os.chmod(hosts.parent, 0o755)
    os.chmod(hosts, 0o644)
    env = {**env, "HUTCH_EGRESS_HOSTS": str(hosts)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([py, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=120, preexec_fn=pre)

    try:
        r = cli("create", "--name", "net", "--allow-host", "up.test", "--allow-port", str(port), "--allow-cidr", "127.0.0.1/32")
        assert r.returncode == 0, r.stdout + r.stderr
        r = cli("exec", "--json", "net", "--", "curl", "-sS", "-m", "10", f"http://up.test:{port}/x")
        assert json.loads(r.stdout)["stdout"] == "hello /x", r.stdout
        r = cli("exec", "--json", "net", "--", "curl", "-sS", "-m", "10", f"http://other.test:{port}/x")
        assert "host_not_allowed" in json.loads(r.stdout)["stdout"]
        out = cli("events", "--json", "net", "--type", "egress_allowed", "--type", "egress_denied").stdout
        found = [json.loads(line) for line in out.splitlines()]  # NDJSON
        assert [e["type"] for e in found] == ["egress_allowed", "egress_denied"]
        assert cli("destroy", "net").returncode == 0
    finally:
        server.shutdown()
        _stop(cli, home)
        subprocess.run(["rm", "-rf", str(home.parent if os.geteuid() == 0 else home), str(hosts.parent)], check=False)


def test_an_image_sandbox_as_an_unprivileged_user(nobody_env: tuple[dict[str, str], Path]) -> None:
    """The user's own image (imported as the user, so the user owns its files) under a writable
    root that bwrap's overlay makes inside the sandbox's user namespace; the agent runs from its
    private runtime (busybox has no python)."""
    from tests.integration.image_roots import MARKER, busybox_root, shared_dir, tree_state

    env, home = nobody_env
    py = _python_for(NOBODY)
    pre = _as_nobody if os.geteuid() == 0 else None
    base = shared_dir("hutch-nobody-image-")
    root = busybox_root(base / "busybox")
    if os.geteuid() == 0:  # the user's own root filesystem
        for top, dirs, files in os.walk(root):
            for name in [".", *dirs, *files]:
                os.lchown(os.path.join(top, name), NOBODY, NOBODY)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([py, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=180, preexec_fn=pre)

    try:
        r = cli("image", "import", f"rootfs:{root}", "mine:1", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        r = cli("create", "--image", "mine:1", "--name", "img", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        info = json.loads(r.stdout)
        r = cli("exec", "--json", "img", "--", "sh", "-c", "id -u; cat /etc/marker; echo mine > /etc/marker; cat /etc/marker")
        out = json.loads(r.stdout)
        assert out["stdout"].splitlines() == ["0", MARKER.strip(), "mine"], out
        upper = home / "sandboxes" / info["id"] / "root" / "upper" / "etc" / "marker"
        assert upper.read_text() == "mine\n"
        assert upper.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
        stored = tree_state(root)
        gone = cli("destroy", "img")
        assert gone.returncode == 0, gone.stderr + (home / "hutchd.log").read_text()[-3000:]
        assert not upper.exists()
        assert tree_state(root) == stored
        r = cli("create", "--image", "mine:1", "--disk", "1G", "--json")
        assert r.returncode == 1 and json.loads(r.stdout)["error"]["kind"] == "unavailable", r.stdout
    finally:
        _stop(cli, home)
        subprocess.run(["rm", "-rf", str(home.parent if os.geteuid() == 0 else home), str(base)], check=False)


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{name}/stat").read_text()
            kids.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        found = kids.get(todo.pop(), [])
        out += found
        todo += found
    return out


def _mentioning(text: str) -> list[int]:
    """Processes whose command line mentions ``text``."""
    out = []
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            if text.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                out.append(int(name))
    return out


def test_a_gvisor_create_as_an_unprivileged_user_is_refused_before_anything_is_made(
    nobody_env: tuple[dict[str, str], Path],
) -> None:
    """Without delegated cgroups nothing bounds a Go Sentry's memory (rlimits cannot): gvisor is
    refused with the way to get them, and the refusal leaves no process, directory or uid entry."""
    env, home = nobody_env
    env = {**env, "HUTCH_POOL_SIZE": "0"}  # no pool members starting while the daemon's processes are counted
    py = _python_for(NOBODY)
    pre = _as_nobody if os.geteuid() == 0 else None

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([py, "-m", "hutch", *args], env=env, capture_output=True, text=True, timeout=180, preexec_fn=pre)

    try:
        checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)["checks"]}
        if checks["cgroups"]["ok"] and "falling back" not in checks["cgroups"]["detail"]:
            pytest.fail(f"this user has delegated cgroups, so gvisor should work: {checks['cgroups']}")  # not here
        assert "needs cgroups" in checks["gvisor"]["detail"] and "Delegate=yes" in (checks["gvisor"]["fix"] or "")
        assert json.loads(cli("list", "--all", "--json").stdout) == []  # starts the user's daemon
        daemon = int((home / "hutchd.pid").read_text())
        before = sorted(_descendants(daemon))  # the daemon's own helpers
        r = cli("create", "--runtime", "gvisor", "--name", "gv", "--memory", "256M", "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        err = json.loads(r.stdout)["error"]
        assert err["kind"] == "unavailable" and "the gvisor runtime needs cgroups" in err["message"], err
        assert "Delegate=yes" in err["hint"], err
        assert sorted(_descendants(daemon)) == before, "the refused create left processes behind"
        assert _mentioning(str(home / "sandboxes")) == [] and _mentioning("hutch-runsc-probe") == []
        assert not (home / "sandboxes").exists() or list((home / "sandboxes").iterdir()) == []
        assert json.loads(cli("list", "--json").stdout) == []  # nothing live; the history keeps the failed create
        (failed,) = json.loads(cli("list", "--all", "--json").stdout)
        assert failed["state"] == "failed" and "needs cgroups" in failed["error"], failed
        registry = Path("/var/lib/hutch/uids/registry.json")
        if registry.exists():  # a user's daemon takes no host uids; nothing of this home may be in root's registry
            assert str(home) not in registry.read_text()
        r = cli("create", "--name", "bw", "--json")  # the daemon is fine: bwrap still works for this user
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        _stop(cli, home)
        subprocess.run(["rm", "-rf", str(home.parent if os.geteuid() == 0 else home)], check=False)
