"""Helper jobs (providers/local/helpers.py) with plain processes: stderr drained while they
run and kept bounded, killed and reaped on timeout, on cancel and on close."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from hutch.errors import ConflictError, UnavailableError
from hutch.providers.local import cgroups
from hutch.providers.local.helpers import HEAD_LINES, TAIL_BYTES, Finished, Helpers, Job

NOISY = "i=0; while [ $i -lt 3000 ]; do echo 'tar: ./a_rather_long_file_name_to_fill_the_pipe: Cannot open' >&2; i=$((i+1)); done"


def helpers(tmp_path: Path) -> Helpers:
    return Helpers(tmp_path, lambda: cgroups.Layout("none"), lambda uid, procs: lambda: None)


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def test_two_noisy_processes_joined_by_a_pipe_finish_with_bounded_stderr(tmp_path: Path) -> None:
    # Regression: the reader's stderr was read only after the writer ended; over 64 KiB of
    # warnings blocked both forever.
    def work(job: Job) -> list[Finished]:
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            job.spawn(["/bin/sh", "-c", NOISY + "; echo data"], uid=None, stdin=subprocess.DEVNULL, stdout=w, pass_fds=[])
            job.spawn(["/bin/sh", "-c", "cat >/dev/null; " + NOISY], uid=None, stdin=r, stdout=subprocess.DEVNULL, pass_fds=[])
        finally:
            os.close(r)
            os.close(w)
        return job.wait()

    done = asyncio.run(helpers(tmp_path).run("copying", ["sbx_a"], work, timeout=120))
    for d in done:
        assert d.returncode == 0 and d.stderr.lines == 3000
        assert len(d.stderr.head) == HEAD_LINES and len(d.stderr.tail) <= TAIL_BYTES
        assert d.stderr.head[0] == "tar: ./a_rather_long_file_name_to_fill_the_pipe: Cannot open"


def spawn_sleeper(pids: list[int]) -> Callable[[Job], list[Finished]]:
    def work(job: Job) -> list[Finished]:
        # a child that forks a grandchild: both go
        proc = job.spawn(
            ["/bin/sh", "-c", "sleep 600 & wait"], uid=None, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=[]
        )
        pids.append(proc.pid)
        return job.wait()

    return work


def test_a_job_out_of_time_is_killed_and_reaped(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(UnavailableError, match="took longer than"):
        asyncio.run(helpers(tmp_path).run("copying", ["sbx_a"], spawn_sleeper(pids), timeout=1))
    assert pids and gone(pids[0])


def test_stop_and_cancel_kill_and_reap_the_job(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = helpers(tmp_path)
        pids: list[int] = []
        task = asyncio.create_task(h.run("copying", ["sbx_a", "sbx_b"], spawn_sleeper(pids), timeout=600))
        other = asyncio.create_task(h.run("saving", ["sbx_c"], spawn_sleeper(pids), timeout=600))
        while len(pids) < 2:
            await asyncio.sleep(0.01)
        await h.stop(ConflictError("sandbox sbx_b is being destroyed"), "sbx_b")  # only the jobs on sbx_b
        with pytest.raises(ConflictError, match="being destroyed"):
            await task
        assert not other.done()
        other.cancel()  # the caller went away
        with pytest.raises(asyncio.CancelledError):
            await other
        assert all(gone(pid) for pid in pids)
        await h.close(UnavailableError("the daemon is stopping"))

    asyncio.run(scenario())
