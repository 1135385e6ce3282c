"""The launcher of a sandbox's bwrap (host.launcher): the idle helper's ``--launch`` and the
sh + setpriv + prlimit fallback leave the command in the same place: in the sandbox's
cgroups, as its uid with no supplementary groups, under its rlimits, with the descriptors
it was given. A failure to join a cgroup or find the command stops it (exit 125), never
runs it outside."""

from __future__ import annotations

import os
import resource
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hutch.providers.local import cgroups, hold
from hutch.providers.local.host import launcher

UID = 600999  # a uid nothing on the machine runs as
PROBE = "cat /proc/self/status /proc/self/limits /proc/self/cgroup; readlink /proc/self/fd/{fd}"


def native(tmp_path: Path) -> str:
    found = hold.prepare(tmp_path / "home")
    assert found.path is not None, f"the idle helper is not built here: {found.detail} (install musl-tools or gcc)"
    return found.path


@pytest.fixture
def group() -> Iterator[cgroups.SandboxCgroup | None]:
    layout = cgroups.detect()
    if os.geteuid() != 0 or layout.mode == "none":
        yield None  # a user's daemon without a delegated cgroup: no cgroup to join
        return
    made, _ = cgroups.create(layout, f"test-launch-{uuid.uuid4().hex[:8]}", 256 << 20, 64, None)
    yield made
    made.kill_all()
    made.remove()


def facts(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            out[key] = " ".join(value.split())
        elif line.startswith(("Max address space", "Max processes")):
            out[line[:20].strip()] = " ".join(line[26:].split()[:2])
        elif "/test-launch-" in line:
            out.setdefault("cgroups", "")
            out["cgroups"] += line.split(":", 2)[2] + " "
    out["fd"] = text.strip().splitlines()[-1]
    return out


def launched(prefix: list[str], tmp_path: Path) -> dict[str, str]:
    marker = tmp_path / "marker"
    marker.write_text("")
    fd = os.open(marker, os.O_RDONLY | os.O_CLOEXEC)  # kept across the launcher's exec only when passed
    try:
        argv = [*prefix, "/bin/sh", "-c", PROBE.format(fd=fd)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, pass_fds=[fd])
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    return facts(r.stdout)


def test_the_native_launcher_and_the_fallback_start_the_command_alike(
    tmp_path: Path, group: cgroups.SandboxCgroup | None
) -> None:
    procs = group.join_files() if group else []
    uid = UID if os.geteuid() == 0 else None
    rlimits = {resource.RLIMIT_AS: 3 << 30, resource.RLIMIT_NPROC: 4321}
    fallback = launcher(uid, procs, rlimits)
    assert fallback is not None, "setpriv and prlimit (util-linux) are needed for the fallback"
    mine = launcher(uid, procs, rlimits, native(tmp_path))
    assert mine is not None and mine[1] == "--launch"
    seen = [launched(prefix, tmp_path) for prefix in (mine, fallback)]
    assert seen[0] == seen[1], seen
    got = seen[0]
    assert got["Max address space"] == f"{3 << 30} {3 << 30}" and got["Max processes"] == "4321 4321", got
    assert got["fd"] == str(tmp_path / "marker")
    if uid is not None:
        assert got["Uid"] == f"{uid} {uid} {uid} {uid}" and got["Gid"] == f"{uid} {uid} {uid} {uid}" and got["Groups"] == ""
    if group is not None:
        assert got["cgroups"].count("/test-launch-") == len(procs), got


def test_the_native_launcher_runs_nothing_it_cannot_place(tmp_path: Path) -> None:
    helper = native(tmp_path)
    flag = tmp_path / "ran"
    cases = (
        [helper, "--launch", f"--procs={tmp_path / 'no-such-cgroup' / 'cgroup.procs'}", "--", "/bin/touch", str(flag)],
        [helper, "--launch", f"--into={tmp_path / 'no-such-cgroup'}", "--", "/bin/touch", str(flag)],
        [helper, "--launch", f"--into={tmp_path}", "--", "/bin/touch", str(flag)],  # not a cgroup: nor its cgroup.procs
        [helper, "--launch", "--", str(tmp_path / "no-such-command")],
        [helper, "--launch", "--bogus", "--", "/bin/touch", str(flag)],
        [helper, "--launch", "--rlimit=x", "--", "/bin/touch", str(flag)],
        [helper, "--launch"],
    )
    for argv in cases:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 125 and r.stderr.startswith("hutch launch: "), (argv, r)
        assert not flag.exists()


def test_both_launchers_join_as_the_writer_not_by_pid(tmp_path: Path) -> None:
    """They write ``0`` (the writing thread: the launcher has one) to each file: a v1 ``tasks``
    write of the writer is the one the kernel makes without its global threadgroup lock, whose
    write waits out an RCU grace period (4-9 ms per create measured here)."""
    for name, prefix in (("native", [native(tmp_path), "--launch"]), ("fallback", launcher(None, ["X"], {}))):
        assert prefix is not None
        files = [tmp_path / f"{name}-tasks-{i}" for i in range(2)]
        for f in files:
            f.write_text("")
        if name == "native":
            argv = [*prefix, *(f"--procs={f}" for f in files), "--", "/bin/true"]
        else:
            argv = [*prefix[: prefix.index("X")], *map(str, files), *prefix[prefix.index("X") + 1 :], "/bin/true"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (name, r)
        assert [f.read_text() for f in files] == ["0\n", "0\n"], name


@pytest.mark.skipif(os.geteuid() != 0, reason="making a v2 cgroup (and dropping to another uid) needs root")
def test_the_native_launcher_starts_in_a_v2_cgroup_with_clone3(tmp_path: Path) -> None:
    """``--into=DIR`` (a v2 cgroup: host.launcher's for a cgroup.procs join): the command starts
    in DIR by clone3(CLONE_INTO_CGROUP), as the uid, under the rlimits; the launcher stays its
    parent holding none of its descriptors (a pipe given to the command ends when it does) and
    exits as it does (its code; 128 + a signal)."""
    _, v2 = cgroups._parse_mounts(Path("/proc/self/mountinfo").read_text())
    _, own = cgroups._parse_self(Path("/proc/self/cgroup").read_text())
    assert v2 is not None and own is not None, "this machine mounts no v2 hierarchy"
    where = v2 / own.lstrip("/") / f"test-into-{uuid.uuid4().hex[:8]}"
    helper = native(tmp_path)
    assert launcher(None, [str(where / "cgroup.procs"), "/x/tasks"], {}, helper) == [
        helper, "--launch", f"--into={where}", "--procs=/x/tasks", "--"
    ]  # fmt: skip
    where.mkdir()
    try:
        probe = "cat /proc/self/cgroup; id -u; sed -n 's/^Max processes *\\([0-9]*\\).*/\\1/p' /proc/self/limits; exit 7"
        nproc = f"--rlimit={int(resource.RLIMIT_NPROC)}:4321"
        argv = [helper, "--launch", f"--into={where}", f"--user={UID}:{UID}", nproc, "--", "/bin/sh", "-c", probe]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 7, r
        lines = r.stdout.split()
        assert f"0::{'/' + str(where.relative_to(v2)).lstrip('/')}" in lines and lines[-2:] == [str(UID), "4321"], r.stdout
        read, write = os.pipe()
        argv = [helper, "--launch", f"--into={where}", f"--user={UID}:{UID}", "--", "/bin/sleep", "60"]
        proc = subprocess.Popen(argv, pass_fds=[write], stdin=subprocess.DEVNULL)
        os.close(write)
        deadline = 100
        while deadline and not (where / "cgroup.procs").read_text().split():
            deadline -= 1
            subprocess.run(["sleep", "0.1"], check=True)
        inside = [int(p) for p in (where / "cgroup.procs").read_text().split()]
        assert len(inside) == 1 and inside[0] != proc.pid, inside  # the command, in DIR; the launcher, its parent, not
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{proc.pid}/fd")) == [0, 1, 2]
        os.kill(inside[0], 9)
        assert proc.wait(timeout=60) == 128 + 9
        assert os.read(read, 1) == b""  # no copy of the pipe left open anywhere
        os.close(read)
    finally:
        for pid in (where / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        for _ in range(100):
            try:
                where.rmdir()
                break
            except OSError:
                subprocess.run(["sleep", "0.1"], check=True)
