"""A pool member still starting is given the normal cpu priority when a hutch run ends
(LocalProvider.hurry_member): its cgroup's cpu.idle (or cpu.shares / cpu.weight) goes from the
lowest back to the normal value; a member whose cgroup is not made yet is left alone."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from hutch.config import Settings
from hutch.providers.local import LocalProvider, cgroups

CPU_FILES = (("cpu.idle", "1", "0"), ("cpu.shares", "2", "1024"), ("cpu.weight", "1", "100"))


def priority(group: cgroups.SandboxCgroup) -> list[tuple[str, str, str, str]]:
    """(file, value, low, normal) of each of the group's dirs' cpu priority file."""
    out = []
    for d in group.dirs:
        for name, low, normal in CPU_FILES:
            if (d / name).exists():
                out.append((name, (d / name).read_text().strip(), low, normal))
                break
    return out


def test_a_starting_member_is_hurried_to_the_normal_priority(tmp_path: Path) -> None:
    provider = LocalProvider(Settings.load(home=tmp_path / "home", provider="local"))
    provider.hurry_member(f"sbx_not_made_{uuid.uuid4().hex[:8]}")  # no cgroup yet: nothing, no error
    layout = cgroups.detect()
    if os.geteuid() != 0 or layout.mode == "none" or "cpu" not in layout.controllers:
        return  # a user's daemon without a delegated cpu controller keeps no priorities to change
    name = f"sbx_hurry_{uuid.uuid4().hex[:8]}"
    group, _ = cgroups.create(layout, name, 256 << 20, 64, None, background=True)
    try:
        before = priority(group)
        assert before and all(value == low for _, value, low, _ in before), before
        provider.hurry_member(name)
        after = priority(group)
        assert after and all(value == normal for _, value, _, normal in after), after
    finally:
        group.remove()
