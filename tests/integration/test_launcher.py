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
