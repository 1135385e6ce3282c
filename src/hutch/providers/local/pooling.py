"""What makes a started local sandbox a pool member (PoolProvider): it takes a request's
environment, secrets, limits and network after it started.

Mixed into :class:`hutch.providers.local.LocalProvider`. The pool itself (which members,
when, how many) is the Service's: service/pool.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hutch.errors import UnavailableError
from hutch.models import Limits, NetworkPolicy, SandboxRecord, SandboxSpec
from hutch.providers.local import bwrap as bw
from hutch.providers.local import cgroups
from hutch.providers.local.channel import Channel

MEMINFO = Path("/proc/meminfo")


class PoolMixin:
    """Mixed into LocalProvider; relies on its cgroup layout, _listen() and _cgroup()."""

    _layout: cgroups.Layout | None
    _listen: Callable[[str, str, NetworkPolicy], Awaitable[None]]
    _cgroup: Callable[[SandboxRecord], cgroups.SandboxCgroup]
    _configure: Callable[[dict[str, str], dict[str, str]], dict[str, Any]]

    def _cgroup_mode(self) -> str:
        if self._layout is None:
            self._layout = cgroups.detect()
        return self._layout.mode

    def pool_refusal(self, spec: SandboxSpec) -> str | None:
        if self._cgroup_mode() == "none" and spec.limits != Limits():
            return "without cgroups, limits are rlimits fixed when a sandbox starts"
        return None

    async def adopt_member(self, rec: SandboxRecord, member: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        data, enforcement = dict(member.data), dict(member.enforcement)
        data.pop("pool_member", None)
        base = data.pop("base_env", None) or bw.base_env()  # the environment it started with (an image's own)
        limits = rec.spec.limits
        if member.data.get("pool_member") and data.get("cgroups"):
            await asyncio.to_thread(self._cgroup(member).set_background, False)
        if self._cgroup_mode() != "none" and limits != member.spec.limits:
            assert self._layout is not None
            try:
                enforcement |= await asyncio.to_thread(
                    cgroups.set_limits, self._layout, rec.id, limits.memory, limits.pids, limits.cpus
                )
            except OSError as exc:
                raise UnavailableError(f"cannot set the pool member's limits: {exc}", hint="run hutch doctor") from exc
        try:
            async with Channel(data["socket"]) as ch:  # also proves that the member still answers
                configure = self._configure(base | rec.spec.env, rec.spec.secrets)
                await ch.request(configure, timeout=10.0)
        except OSError as exc:
            raise UnavailableError(f"the pool member does not answer: {exc}", hint="run hutch doctor") from exc
        if rec.spec.network.mode != "none":
            await self._listen(rec.id, data["socket"], rec.spec.network)
        return data, enforcement

    async def member_memory(self, rec: SandboxRecord) -> int | None:
        return self._cgroup(rec).memory_current() if rec.data.get("cgroups") else None

    def hurry_member(self, member_id: str) -> None:
        layout = self._layout or cgroups.detect()
        parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
        dirs = [p / member_id for p in parents if (p / member_id).is_dir()]
        if dirs:
            cgroups.SandboxCgroup(dirs, v2=False).set_background(False)

    def memory_available(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            for line in MEMINFO.read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return None
