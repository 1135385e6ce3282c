"""Sandboxes started from an image: a writable root of their own over the image's read-only
files, the agent running without anything of the image (busybox has no python; musl is
another libc), and the isolation of a host-/usr sandbox kept."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, hutch_env, sweep
from tests.integration.image_roots import MARKER, busybox_root, image_daemon, musl_root, shared_dir, tree_state

from hutch import Sandbox
from hutch.errors import NotFoundError


@pytest.fixture(scope="session")
def roots() -> Iterator[dict[str, Path]]:
    base = shared_dir("hutch-images-")
    try:
        yield {"busybox": busybox_root(base / "busybox"), "musl": musl_root(base / "musl")}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def idaemon(hutch_home: Path, roots: dict[str, Path]) -> Iterator[Daemon]:
    images: dict[str, dict[str, object]] = {
        "busybox": {"rootfs": str(roots["busybox"]), "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_IMAGE=yes"]},
        "musl": {"rootfs": str(roots["musl"])},
        "app": {
            "rootfs": str(roots["busybox"]),
            "entrypoint": ["/bin/sh", "-c"],
            "cmd": ['echo "from the image cmd in $(pwd) as $(id -u) with $GREETING"'],
            "workdir": "/etc",
            "env": ["GREETING=hello", "PATH=/bin"],
        },
    }
    d = image_daemon(hutch_home, images)
    try:
        yield d
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sweep(hutch_home)


def _upper(d: Daemon, sbx: Sandbox) -> Path:
    return d.home / "sandboxes" / sbx.id / "root" / "upper"


def test_a_busybox_image_runs_the_agent_without_python(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="busybox") as sbx:
        r = sbx.exec("id -u; echo $HOME $FROM_IMAGE; cat /etc/marker; ls /usr/bin/python3 /usr/lib/x86_64-linux-gnu 2>&1")
        lines = r.stdout.splitlines()
        assert lines[:3] == ["0", "/root yes", MARKER.strip()], r.stdout
        assert r.stdout.count("No such file") == 2, r.stdout
        sbx.files.write("hello.txt", "from the host")  # files go through the agent too
        assert sbx.exec("cat /workspace/hello.txt").stdout == "from the host"
        assert sbx.refresh()["spec"]["image"] == "busybox"


def test_a_musl_image_runs_the_agent_and_musl_programs(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="musl") as sbx:
        r = sbx.exec("ls /lib /lib64 2>&1; /lib/ld-musl-x86_64.so.1 --version 2>&1; true")
        assert "ld-musl-x86_64.so.1" in r.stdout and "libc.so.6" not in r.stdout
        assert "musl libc" in r.stdout, r.stdout


def test_writes_land_in_the_sandboxs_upper_never_in_the_image(idaemon: Daemon, roots: dict[str, Path]) -> None:
    before = tree_state(roots["busybox"])
    a = Sandbox.create(settings=idaemon.settings, image="busybox")
    b = Sandbox.create(settings=idaemon.settings, image="busybox")
    r = a.exec("echo changed > /etc/marker && echo new > /usr/local/added && rm /bin/ls && echo r > /root/r && cat /etc/marker")
    assert r.exit_code == 0 and r.stdout == "changed\n", r.stderr
    upper = _upper(idaemon, a)
    assert (upper / "etc" / "marker").read_text() == "changed\n"
    assert (upper / "usr" / "local" / "added").read_text() == "new\n"
    assert (upper / "root" / "r").exists()
    if os.geteuid() == 0:  # the sandbox's own host uid, never root's
        assert (upper / "etc" / "marker").stat().st_uid >= idaemon.settings.uid_base
    r = b.exec("cat /etc/marker; ls -A /usr/local; ls -A /root; ls /bin/ls")
    assert r.stdout.splitlines() == [MARKER.strip(), "/bin/ls"], r.stdout  # b sees the image, not a's writes
    assert tree_state(roots["busybox"]) == before
    sandbox_dir = idaemon.home / "sandboxes" / a.id
    a.destroy()
    assert not sandbox_dir.exists()
    b.destroy()
    assert tree_state(roots["busybox"]) == before


def test_home_and_tmp_are_on_disk_not_small_tmpfs(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="busybox") as sbx:
        r = sbx.exec("stat -f -c %T /tmp $HOME; dd if=/dev/zero of=$HOME/big bs=1M count=80 2>&1 && ls -l $HOME/big")
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "tmpfs" not in r.stdout.split("\n", 2)[0] + r.stdout.split("\n", 2)[1], r.stdout
        assert str(80 << 20) in r.stdout


def test_image_sandboxes_keep_the_isolation(idaemon: Daemon) -> None:
    with Sandbox.create(settings=idaemon.settings, image="busybox") as sbx:
        r = sbx.exec(
            "grep -E '^(CapEff|CapPrm|CapBnd|Seccomp|NoNewPrivs)' /proc/self/status; unshare -U true; echo rc=$?; "
            "touch /.hutch/rt/x 2>&1; echo rt=$?; touch /.hutch/agent/x 2>&1; echo agent=$?; "
            "ls /proc | grep -cE '^[0-9]+$'; cat /proc/net/dev | tail -n +3 | cut -d: -f1"
        )
        out = r.stdout
        caps = {line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines() if line.startswith("Cap")}
        for name in ("CapEff", "CapPrm", "CapBnd"):  # root of its own namespace at most: never these
            for bit in (12, 16, 17, 19, 21, 25):  # NET_ADMIN, SYS_MODULE, SYS_RAWIO, SYS_PTRACE, SYS_ADMIN, SYS_TIME
                assert not caps[name] & (1 << bit), (name, bit, out)
        assert "Seccomp:\t2" in out and "NoNewPrivs:\t1" in out, out
        assert "rc=1" in out and "rt=1" in out and "agent=1" in out, out
        assert out.split()[-1] == "lo", out
        r = sbx.exec(f"ls {idaemon.home} 2>&1; find / -xdev -type s 2>/dev/null; ls /run /var/run /home 2>&1")
        assert "hutchd.sock" not in r.stdout
        # what the agent brings is its runtime only: no host tool is reachable
        r = sbx.exec("ls /.hutch/rt; ls /.hutch/rt/bin; ls /.hutch/rt/lib | grep -v '[.]so'")
        words = r.stdout.split()
        assert words[:3] == ["bin", "lib", "python3"] and len(words) == 4, r.stdout
        assert re.fullmatch(r"python3\.\d+", words[3]), r.stdout  # the stdlib: nothing else of the host's /usr


def test_an_unknown_image_is_not_found_with_the_pull_hint(idaemon: Daemon) -> None:
    with pytest.raises(NotFoundError) as err:
        Sandbox.create(settings=idaemon.settings, image="nope:1")
    assert "hutch image pull nope:1" in (err.value.hint or "")
    env = hutch_env(idaemon.home)
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "create", "--image", "nope:2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "not_found"


def test_the_cli_runs_in_an_image(idaemon: Daemon) -> None:
    env = hutch_env(idaemon.home)
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "run", "--image", "busybox", "--", "sh", "-c", "cat /etc/marker; id -u"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == MARKER + "0\n"


def _cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(d.home), capture_output=True, text=True, timeout=120
    )


def test_the_images_config_is_the_sandboxs_default(idaemon: Daemon) -> None:
    r = _cli(idaemon, "run", "--image", "app")  # no command: ENTRYPOINT + CMD, in WORKDIR, with ENV
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "from the image cmd in /etc as 0 with hello\n"
    r = _cli(
        idaemon, "run", "--image", "app", "-e", "GREETING=mine", "--workdir", "/tmp", "--", "sh", "-c", "pwd; echo $GREETING"
    )
    assert r.stdout == "/tmp\nmine\n", r.stdout + r.stderr  # the request's own values win
    r = _cli(idaemon, "run", "--image", "busybox", "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "names none" in json.loads(r.stdout)["error"]["message"]


def test_disk_caps_what_a_sandbox_writes(idaemon: Daemon) -> None:
    sbx = Sandbox.create(settings=idaemon.settings, image="busybox", disk="64M")
    sdir = idaemon.home / "sandboxes" / sbx.id
    try:
        assert "64" in sbx.refresh()["enforcement"]["disk"]
        for target in ("/root/big", "/workspace/big"):  # the writable root and the workspace share the cap
            r = sbx.exec(f"dd if=/dev/zero of={target} bs=1M count=100 2>&1; echo rc=$?; rm -f {target}")
            assert "No space left on device" in r.stdout and "rc=1" in r.stdout, r.stdout
        r = sbx.exec("echo still > /etc/written && cat /etc/written")  # the sandbox keeps working
        assert r.stdout == "still\n"
        assert str(sdir / "disk") in Path("/proc/self/mountinfo").read_text()
    finally:
        sbx.destroy()
    assert not sdir.exists()
    assert str(sdir) not in Path("/proc/self/mountinfo").read_text()  # nothing stays mounted
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    assert str(sdir) not in loops


def test_an_image_imported_into_the_store_starts_sandboxes(daemon: Daemon, roots: dict[str, Path]) -> None:
    """The real daemon's store (hutch image import rootfs:DIR) is what --image resolves through."""
    import asyncio

    from hutch.client import AsyncClient

    async def imported() -> list[dict[str, object]]:
        client = AsyncClient(daemon.settings, autostart=False)
        try:
            return [dict(f) async for f in client.image_import(f"rootfs:{roots['busybox']}", "stored-busybox:1")]
        finally:
            await client.close()

    frames = asyncio.run(imported())
    assert frames[-1]["type"] == "done", frames
    with Sandbox.create(settings=daemon.settings, image="stored-busybox:1") as sbx:
        r = sbx.exec("cat /etc/marker; id -u; echo x > /etc/marker")
        assert r.stdout == MARKER + "0\n", r.stdout + r.stderr
        assert sbx.refresh()["spec"]["image"] == "stored-busybox:1"


def test_fork_and_snapshot_carry_the_writable_root(idaemon: Daemon) -> None:
    src = Sandbox.create(settings=idaemon.settings, image="busybox")
    r = src.exec(
        "echo forked > /etc/marker && mkdir -p /usr/local/app && echo data > /usr/local/app/f"
        " && chown -R 1234:1234 /usr/local/app"
        " && rm /bin/ls && echo ws > /workspace/w"
    )
    assert r.exit_code == 0, r.stderr
    probe = "cat /etc/marker /usr/local/app/f /workspace/w; stat -c %u /usr/local/app/f; ls /bin/ls 2>&1"
    expected = ["forked", "data", "ws", "1234"]
    children = src.fork(1)
    child = children[0]
    assert not isinstance(child, Exception), child
    lines = child.exec(probe).stdout.splitlines()
    assert lines[:4] == expected and "No such file" in lines[4], lines  # its writes, owners and deletions
    assert src.exec("head -c 3000000 /dev/urandom > /etc/big").exit_code == 0  # written in the root, not /workspace
    snap = src.snapshot("with-root")
    files = sorted((idaemon.home / "snapshots").glob("with-root*"))
    assert len(files) == 2, files  # the workspace's tar and the writable root's beside it
    assert snap["size"] == sum(f.stat().st_size for f in files) > 3_000_000, (snap, files)  # it counts what it holds
    assert [s["size"] for s in idaemon.client().snapshots() if s["name"] == "with-root"] == [snap["size"]]
    src.exec("echo later > /etc/marker")
    restored = Sandbox.restore("with-root", settings=idaemon.settings)
    lines = restored.exec(probe).stdout.splitlines()
    assert lines[:4] == expected and "No such file" in lines[4], lines
    assert restored.exec("cat /etc/marker").stdout == "forked\n"  # as it was when saved


def test_a_tenant_keeps_its_writable_root_across_its_sandboxes(idaemon: Daemon) -> None:
    def tenant_sandbox(image: str) -> subprocess.CompletedProcess[str]:
        return _cli(idaemon, "create", "--image", image, "--tenant", "builder", "--json")

    first = Sandbox.connect(json.loads(tenant_sandbox("busybox").stdout)["id"], settings=idaemon.settings)
    assert first.exec("echo installed > /usr/local/tool && chown 1234 /usr/local/tool").exit_code == 0
    first.destroy()
    second = Sandbox.connect(json.loads(tenant_sandbox("busybox").stdout)["id"], settings=idaemon.settings)
    r = second.exec("cat /usr/local/tool; stat -c %u /usr/local/tool; echo more > /usr/local/tool")
    assert r.stdout.split() == ["installed", "1234"], r.stdout + r.stderr  # what the last one installed, owners kept
    second.destroy()
    refused = tenant_sandbox("musl")  # an upper means something only over its own image
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "hutch tenant delete builder" in json.loads(refused.stdout)["error"]["hint"]
    kept = idaemon.home / "tenants" / "builder" / "root"
    assert kept.is_dir()
    assert _cli(idaemon, "tenant", "delete", "builder").returncode == 0
    assert not kept.exists()
