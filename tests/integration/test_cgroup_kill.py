"""Killing every task of a sandbox's cgroup (destroy, a helper's timeout, the test sweep): with
no ``cgroup.kill`` (cgroup v1), one SIGKILL per task, so the cgroup is frozen first. Otherwise a
task could run between two kills: with pids wrapped (pid_max 32768 here), a run's supervisor
saw its command die and reported the run killed before the sandbox itself was gone."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import pytest

from hutch.providers.local import cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes cgroups of its own (root)")


def test_every_task_gets_its_kill_while_the_cgroup_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    layout = cgroups.detect()
    group, _ = cgroups.create(layout, f"test-kill-{uuid.uuid4().hex[:8]}", 256 << 20, 64, None)
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(6)]
    try:
        for proc in procs:
            for path in group.procs_files():
                with open(path, "w") as f:
                    f.write(str(proc.pid))
        assert group.pids() == {p.pid for p in procs}
        seen: list[bool | None] = []
        real_kill = os.kill

        def kill(pid: int, sig: int) -> None:
            if sig == signal.SIGKILL:
                seen.append(group.frozen())
            real_kill(pid, sig)

        monkeypatch.setattr(cgroups.os, "kill", kill)
        group.kill_all()
        monkeypatch.undo()
        assert [p.wait(10) for p in procs] == [-signal.SIGKILL] * len(procs)
        assert group.pids() == set()
        atomic = any((d / "cgroup.kill").exists() for d in group.dirs)
        if atomic:
            assert seen == []  # the kernel killed them all at once
        else:
            assert group.freezer() is not None, "a cgroup v1 sandbox has the freezer controller"
            assert seen and all(seen), seen  # every SIGKILL while frozen
        assert group.frozen() is False  # never left frozen
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        group.remove()
