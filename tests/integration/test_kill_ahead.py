"""A kill that reaches a sandbox before the run it names (local provider, in process): the
daemon records a run, and answers its id, before the run's request reaches the sandbox's
agent; on a busy machine a kill sent right after (``hutch kill``, the E2B SDK's
``commands.kill`` after a background start) came first, was answered "already ended", and the
command then ran on. The agent now keeps the kill for that run: its supervisor kills the
command as it starts it."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from pathlib import Path

from tests.conftest import sweep

from hutch.config import Settings
from hutch.models import SandboxSpec, new_id
from hutch.provider import ExecSpec
from hutch.service import Service


def test_a_kill_that_comes_before_its_run_kills_the_run_as_it_starts() -> None:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    settings = Settings.load(home=home, provider="local", pool_size=0)

    async def go() -> None:
        svc = Service(settings)
        try:
            rec = await svc.create(SandboxSpec(provider="local"))
            provider = svc.provider("local")
            run_id = new_id("run")
            assert await provider.kill_run(rec, run_id, signal.SIGKILL)  # kept for the run to come
            spec = ExecSpec(run_id=run_id, argv=["sleep", "60"], cwd="/workspace", max_output=1 << 20, timeout=30)
            raw = await provider.exec(rec, spec)
            assert (raw.killed, raw.signal, raw.timed_out) == (True, signal.SIGKILL, False), raw
            other = await provider.exec(rec, ExecSpec(run_id=new_id("run"), argv=["true"], cwd="/workspace", max_output=1024))
            assert (other.exit_code, other.killed) == (0, False)  # only that run
            await svc.destroy(rec.id)
        finally:
            await svc.close()

    try:
        asyncio.run(go())
    finally:
        sweep(home)
        shutil.rmtree(home, ignore_errors=True)
