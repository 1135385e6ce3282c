"""cgroup layout detection and limit writing on fake cgroup trees (v2, v1, hybrid, none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hutch.providers.local import cgroups


def _proc(tmp: Path, mounts: list[tuple[str, str, str]], self_cgroup: str) -> Path:
    proc = tmp / "proc"
    proc.mkdir()
    lines = [
        f"{i} 1 0:{i} / {point} rw,relatime - {fstype} {fstype} {opts}" for i, (point, fstype, opts) in enumerate(mounts, 30)
    ]
    (proc / "mountinfo").write_text("\n".join(lines) + "\n")
    (proc / "cgroup").write_text(self_cgroup)
    return proc


def _v1_tree(root: Path, controllers: list[str]) -> list[tuple[str, str, str]]:
    mounts = []
    for c in controllers:
        (root / c).mkdir(parents=True)
        mounts.append((str(root / c), "cgroup", f"rw,{c}"))
    return mounts


def test_pure_v2_with_delegation(tmp_path: Path) -> None:
    unified = tmp_path / "cg"
    own = unified / "user.slice" / "hutch.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.procs").write_text("")
    proc = _proc(tmp_path, [(str(unified), "cgroup2", "rw")], "0::/user.slice/hutch.scope\n")
    layout = cgroups.detect(proc)
    assert layout.mode == "v2"
    assert layout.v2 == own and layout.v2_controllers == ("memory", "pids", "cpu")
    cg, enforced = cgroups.create(layout, "sbx_1", 64 << 20, 32, 0.5)
    leaf = own / "hutch" / "sbx_1"
    assert cg.dirs == [leaf]
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (own / "hutch" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (leaf / "memory.max").read_text() == str(64 << 20)
    assert (leaf / "pids.max").read_text() == "32"
    assert (leaf / "cpu.max").read_text() == "50000 100000"
    assert enforced == {"memory": "cgroup v2", "pids": "cgroup v2", "cpus": "cgroup v2"}
    assert cg.join_files() == [str(leaf / "cgroup.procs")]  # v2's cgroup.threads refuses a move between domains
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    assert cg.oom_kills() == 2


def test_hybrid_like_these_machines(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mounts = _v1_tree(root, ["memory", "pids", "cpu"])
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    (root / "memory" / "job").mkdir()
    proc = _proc(tmp_path, [*mounts, (str(root / "unified"), "cgroup2", "rw")], "4:memory:/job\n8:pids:/\n1:cpu:/\n0::/\n")
    layout = cgroups.detect(proc)
    assert layout.mode == "hybrid"
    assert layout.v1 == {
        "memory": root / "memory" / "job" / "hutch",
        "pids": root / "pids" / "hutch",
        "cpu": root / "cpu" / "hutch",
    }
    assert layout.v2 is None
    cg, enforced = cgroups.create(layout, "sbx_2", 1 << 30, 512, None)
    assert (root / "memory" / "job" / "hutch" / "sbx_2" / "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert (root / "pids" / "hutch" / "sbx_2" / "pids.max").read_text() == "512"
    assert "cpus" not in enforced  # no --cpus given: nothing written
    assert not (root / "cpu" / "hutch" / "sbx_2" / "cpu.cfs_quota_us").exists()
    (root / "memory" / "job" / "hutch" / "sbx_2" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
    )
    assert cg.oom_kills() == 5
    assert all(d.is_dir() for d in cg.dirs) and len(cg.dirs) == 3
    assert cg.join_files() == [str(d / "tasks") for d in cg.dirs]  # "0" there moves the writer without the global lock


def test_pure_v1(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mounts = _v1_tree(root, ["memory", "pids", "cpu"])
    proc = _proc(tmp_path, mounts, "3:memory:/\n2:pids:/\n1:cpu:/\n")
    layout = cgroups.detect(proc)
    assert layout.mode == "v1"
    _, enforced = cgroups.create(layout, "sbx_3", 1 << 20, 8, 2)
    assert (root / "cpu" / "hutch" / "sbx_3" / "cpu.cfs_quota_us").read_text() == "200000"
    assert enforced["cpus"] == "cgroup v1"


def test_no_access_means_none_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unified = tmp_path / "cg"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpu memory pids\n")
    proc = _proc(tmp_path, [(str(unified), "cgroup2", "rw")], "0::/\n")
    assert cgroups.detect(proc).mode == "v2"
    monkeypatch.setattr(cgroups, "_writable", lambda path: False)  # what an unprivileged user sees
    layout = cgroups.detect(proc)
    assert layout.mode == "none"
    assert "no writable cgroup" in (layout.problem or "")


def test_unreadable_proc_is_none(tmp_path: Path) -> None:
    layout = cgroups.detect(tmp_path / "missing")
    assert layout.mode == "none" and "cannot read" in (layout.problem or "")


def test_a_hybrid_with_a_v2_controller_joins_each_hierarchy_its_way(tmp_path: Path) -> None:
    """memory and pids on v1, cpu on v2: the v1 cgroups by their tasks files, the v2 one by its
    cgroup.procs (the native launcher starts in it with clone3)."""
    root = tmp_path / "cg"
    mounts = _v1_tree(root, ["memory", "pids"])
    unified = root / "unified"
    (unified / "job").mkdir(parents=True)
    (unified / "job" / "cgroup.controllers").write_text("cpu\n")
    proc = _proc(tmp_path, [*mounts, (str(unified), "cgroup2", "rw")], "4:memory:/\n8:pids:/\n0::/job\n")
    layout = cgroups.detect(proc)
    assert layout.mode == "hybrid" and layout.v2_controllers == ("cpu",)
    cg, _ = cgroups.create(layout, "sbx_4", 1 << 20, 8, 1)
    assert cg.join_files() == [
        str(root / "memory" / "hutch" / "sbx_4" / "tasks"),
        str(root / "pids" / "hutch" / "sbx_4" / "tasks"),
        str(unified / "job" / "hutch" / "sbx_4" / "cgroup.procs"),
    ]
