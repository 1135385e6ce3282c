"""exec --user: one run as another user of a sandbox that runs as root inside its own user namespace
(a range of uids), looked up in the sandbox's own /etc/passwd when the run starts; tried from inside
(no capabilities, no new privileges, no way back to root) and refused, saying why, everywhere else."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env, sweep
from tests.integration.image_roots import busybox_root, shared_dir

from hutch import AsyncSandbox, Sandbox
from hutch.client import Client
from hutch.errors import InvalidError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ranges of host uids are handed out by a root daemon")

PASSWD = """root:x:0:0:root:/root:/bin/sh
alice:x:1000:1000:Alice:/home/alice:/bin/sh
bob:x:1001:1001::/home/bob:/bin/sh
nobody:x:65534:65534::/nonexistent:/bin/false
broken:x:notanumber:1::/:/bin/sh
"""
GROUP = """root:x:0:
alice:x:1000:
bob:x:1001:
team:x:2000:alice,bob
video:x:44:alice
far:x:70000:alice
nogroup:x:65534:
"""
CAPS = ("CapInh", "CapPrm", "CapEff", "CapAmb")


@pytest.fixture(scope="module")
def daemon_home() -> Iterator[Daemon]:
    home = shared_dir("hutch-execuser-")
    root = busybox_root(home / "busybox")
    (root / "etc" / "passwd").write_text(PASSWD)
    (root / "etc" / "group").write_text(GROUP)
    (root / "home" / "alice").mkdir(parents=True)
    os.chown(root / "home" / "alice", 1000, 1000)
    images = {
        "users": {"rootfs": str(root), "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
        "as-alice": {"rootfs": str(root), "user": "alice", "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
    }
    (home / "test-images.json").write_text(json.dumps(images))
    base = 40_000_000 + random.randrange(1000) * 1_000_000  # a pool of its own (concurrent runs of the suite)
    d = Daemon(
        home,
        argv=("hutch.testing.images",),
        HUTCH_TEST_IMAGES=str(home / "test-images.json"),
        HUTCH_UID_REGISTRY=str(home / "uids"),
        HUTCH_UID_BASE=str(base),
    ).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def run(c: Client, sid: str, script: str, user: str | None = None) -> dict[str, object]:
    req: dict[str, object] = {"command": ["/bin/sh", "-c", script], "timeout": 60.0}
    if user is not None:
        req["user"] = user
    return dict(c.exec(sid, req))  # type: ignore[arg-type]


def caps(status: str) -> dict[str, int]:
    return {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines() if line.startswith(CAPS)}


def test_a_run_becomes_a_user_of_the_images_passwd_with_its_groups_and_home(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "image": "users"})["id"])
        r = run(c, sid, "id -u; id -g; id -G; echo $HOME $USER $LOGNAME; grep -E '^(Cap|NoNewPrivs)' /proc/self/status", "alice")
        assert r["exit_code"] == 0, r
        lines = str(r["stdout"]).splitlines()
        assert lines[:3] == ["1000", "1000", "1000 44 2000"], r  # far (70000) is not mapped: left out
        assert lines[3] == "/home/alice alice alice"
        status = "\n".join(lines[4:])
        assert caps(status) == dict.fromkeys(CAPS, 0), status  # every capability gone, none to inherit
        assert "NoNewPrivs:\t1" in status
        # the sandbox's own runs are still root with its capabilities
        r = run(c, sid, "id -u; grep CapEff /proc/self/status")
        assert str(r["stdout"]).splitlines()[0] == "0" and caps(str(r["stdout"]))["CapEff"] != 0, r
        # a group given by name or number; a uid the passwd does not know (HOME /); the run's own HOME wins
        assert str(run(c, sid, "id -u; id -g; id -G", "bob:team")["stdout"]).split() == ["1001", "2000", "2000"]
        assert str(run(c, sid, "id -u; id -g; echo $HOME", "1234:1234")["stdout"]).split() == ["1234", "1234", "/"]
        got = dict(c.exec(sid, {"command": ["/bin/sh", "-c", "echo $HOME"], "user": "alice", "env": {"HOME": "/tmp"}}))
        assert str(got["stdout"]).strip() == "/tmp"


def test_users_are_looked_up_inside_the_sandbox_and_bad_ones_fail_the_run(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "image": "users"})["id"])
        # a user the workload adds is found: the lookup reads the sandbox's /etc/passwd, not the image's or the host's
        assert run(c, sid, "echo carol:x:1500:1500::/home/carol:/bin/sh >> /etc/passwd")["exit_code"] == 0
        r = run(c, sid, "id -u; echo $HOME; touch /workspace/x 2>&1 || echo refused", "carol")
        assert str(r["stdout"]).splitlines() == ["1500", "/home/carol", "touch: /workspace/x: Permission denied", "refused"]
        for user, why in (
            ("ghost", "no user 'ghost' in the sandbox's /etc/passwd"),
            ("broken", "no user 'broken'"),
            ("alice:nogroup-here", "no group 'nogroup-here' in the sandbox's /etc/group"),
            ("70000", "uid 70000 of --user 70000 is not mapped in this sandbox (mapped: 0-65535)"),
            ("1000:99999", "gid 99999 of --user 1000:99999 is not mapped"),
        ):
            r = run(c, sid, "echo ran", user)
            assert (r["exit_code"], r["status"], r["stdout"]) == (126, "failed", ""), (user, r)
            assert why in str(r["error"]), (user, r)
        # /etc/passwd is the workload's to write: a FIFO there fails the run at once, never blocks it
        r = run(c, sid, "mv /etc/passwd /etc/passwd.real && mkfifo /etc/passwd")
        assert r["exit_code"] == 0, r
        r = run(c, sid, "echo ran", "alice")
        assert r["exit_code"] == 126 and "is not a regular file" in str(r["error"]), r
        # nor does it block the agent, which names the users of ps from the same file
        assert any(p["command"].startswith("python3") or p["pid"] == 1 for p in c.ps(sid))
        assert run(c, sid, "echo still answers")["stdout"] == "still answers\n"


def test_hostile_user_strings_are_refused_before_a_run(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "image": "users"})["id"])
        before = len(c.runs(sid))
        for user in ("../../etc/shadow", "a:b:c", "alice\n", "alice\nroot", "-1", "1:-1", "9999999999", "", "al ice", "ü"):
            with pytest.raises(InvalidError) as err:
                run(c, sid, "echo ran", user)
            assert "--user" in err.value.message and err.value.hint, user
        assert len(c.runs(sid)) == before  # nothing was recorded, nothing ran


def test_a_switched_run_cannot_get_root_back(daemon_home: Daemon) -> None:
    """In a host-/usr sandbox run as root inside (python3 from the host): setuid(0), setgroups, a root-owned
    file, signalling the sandbox's init and agent all fail for the switched run."""
    probe = r"""
import os, errno
def fails(f):
    try:
        f()
    except PermissionError:
        return "refused"
    return "ALLOWED"
print(os.getresuid(), os.getresgid(), os.getgroups())
print(fails(lambda: os.setuid(0)), fails(lambda: os.setresuid(0, 0, 0)), fails(lambda: os.setgid(0)))
print(fails(lambda: os.setgroups([0])), fails(lambda: open("/workspace/root-only", "w")), fails(lambda: os.kill(1, 0)))
print(fails(lambda: os.kill(2, 0)), fails(lambda: os.chown("/workspace/mine", 0, 0)))
"""
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "user": "root"})["id"])
        assert run(c, sid, "touch /workspace/root-only && chmod 600 /workspace/root-only && touch /workspace/mine "
                           "&& chown 65534 /workspace/mine && chmod 1777 /workspace")["exit_code"] == 0  # fmt: skip
        r = dict(c.exec(sid, {"command": ["python3", "-c", probe], "user": "nobody", "timeout": 60.0}))
        assert r["exit_code"] == 0, r
        lines = str(r["stdout"]).splitlines()
        assert lines[0] == "(65534, 65534, 65534) (65534, 65534, 65534) [65534]", r
        assert lines[1:] == ["refused refused refused", "refused refused refused", "refused refused"], r


def test_sandboxes_that_cannot_switch_users_refuse_saying_why(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        plain = str(c.create({"provider": "local"})["id"])  # one mapped uid
        alice = str(c.create({"provider": "local", "image": "as-alice"})["id"])  # the agent gave up root at start
        assert str(run(c, alice, "id -un")["stdout"]).strip() == "alice"
        for sid, why, hint in (
            (plain, "maps one uid", "--user root"),
            (alice, "runs as alice (uid 1000): its agent gave up root", "--user root"),
        ):
            before = len(c.runs(sid))
            with pytest.raises(InvalidError) as err:
                run(c, sid, "id", "bob")
            assert why in err.value.message and hint in (err.value.hint or ""), err.value
            assert len(c.runs(sid)) == before


def test_a_host_usr_sandbox_as_root_names_the_users_it_switches_to(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "user": "root"})["id"])
        # the sandbox's generated /etc files are readable by every user of it, as on any system
        r = run(c, sid, "stat -c '%a %U' /etc/passwd /etc/group /etc/hosts /etc/hostname", "nobody")
        assert str(r["stdout"]).split("\n")[:4] == ["644 root"] * 4, r
        r = run(c, sid, "id -un; id -gn; whoami", "nobody")
        assert (r["exit_code"], str(r["stdout"]).split()) == (0, ["nobody", "nogroup", "nobody"]), r
        plain = str(c.create({"provider": "local"})["id"])
        assert str(run(c, plain, "id -un; id -gn")["stdout"]).split() == ["sandbox", "sandbox"]


def test_the_cli_and_the_sdks_take_user(daemon_home: Daemon) -> None:
    env = hutch_env(daemon_home.home)
    with Sandbox.create(settings=daemon_home.settings, image="users") as sbx:
        assert sbx.exec("id -un", user="alice").stdout.strip() == "alice"
        done = sbx.exec(["/bin/sh", "-c", "id -u"], background=True, user="bob").wait(timeout=60)
        assert (done.exit_code, done.stdout.strip()) == (0, "1001"), done

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "hutch", *args], input="hello\n", env=env, capture_output=True, text=True, timeout=120
            )

        got = cli("exec", "--user", "alice", sbx.id, "--", "/bin/sh", "-c", "id -u")
        assert (got.returncode, got.stdout.strip()) == (0, "1000"), got
        got = cli("exec", "-u", "ghost", sbx.id, "--", "/bin/sh", "-c", "id -u")
        assert got.returncode == 126 and "no user 'ghost'" in got.stderr, got
        # an interactive run with a terminal as another user (the attach WebSocket carries user too)
        got = cli("exec", "-i", "-t", "--user", "alice", sbx.id, "--", "/bin/sh", "-c", "id -u; tty; read x; echo got $x")
        lines = [line for line in got.stdout.splitlines() if line != "hello"]  # the terminal echoes the input when it comes
        assert got.returncode == 0 and lines == ["1000", "/dev/pts/0", "got hello"], got
        got = cli("exec", "--user", "../root", sbx.id, "--", "id")
        assert got.returncode == 2 and "invalid --user" in got.stderr and "1000:1000" in got.stderr, got

        async def in_async() -> str:
            async with await AsyncSandbox.connect(sbx.id, settings=daemon_home.settings) as asbx:
                return (await asyncio.wait_for(asbx.exec("id -g", user="bob:team"), 60)).stdout

        assert asyncio.run(in_async()).strip() == "2000"


def test_a_gvisor_sandbox_switches_users_too(daemon_home: Daemon) -> None:
    with daemon_home.client() as c:
        sid = str(c.create({"provider": "local", "image": "users", "runtime": "gvisor"})["id"])
        r = run(c, sid, "id -u; id -G; echo $HOME; grep -E '^Cap(Prm|Eff|Amb)' /proc/self/status", "alice")
        assert r["exit_code"] == 0, r
        lines = str(r["stdout"]).splitlines()
        # gVisor's own kernel maps every id inside (far, 70000, is a group there too)
        assert (lines[0], lines[1].split()[:3], lines[2]) == ("1000", ["1000", "44", "2000"], "/home/alice"), r
        assert caps("\n".join(lines[3:])) == {"CapPrm": 0, "CapEff": 0}, r  # (gVisor shows no CapAmb)
        r = run(c, sid, "echo ran", "ghost")
        assert r["exit_code"] == 126 and "no user 'ghost'" in str(r["error"]), r
