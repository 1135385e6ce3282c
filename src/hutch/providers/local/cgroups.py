"""cgroup v1, v2 and hybrid layouts: one cgroup per sandbox, nested under hutch's own.

Detection reads ``/proc/self/mountinfo`` and ``/proc/self/cgroup``; each controller
(memory, pids, cpu) is used where the kernel has it: on a v1 hierarchy, or on the v2
mount when listed in its ``cgroup.controllers``. The ``root`` argument lets tests point
detection at a fake tree.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from hutch.provider import CheckResult
from hutch.providers.local import pidwait

CONTROLLERS = ("memory", "pids", "cpu")
V1_EXTRA = ("freezer",)  # pause/resume: the v1 freezer; on v2 every cgroup has cgroup.freeze
GROUP = "hutch"


@dataclass
class Layout:
    mode: str  # v2 | v1 | hybrid | none
    v1: dict[str, Path] = field(default_factory=dict)  # controller -> hutch parent dir on v1
    v2: Path | None = None  # hutch parent dir on v2
    v2_controllers: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def controllers(self) -> list[str]:
        return sorted(set(self.v1) | set(self.v2_controllers))


def _parse_mounts(mountinfo: str) -> tuple[dict[str, Path], Path | None]:
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 3:
            continue
        fstype, point, opts = rparts[0], Path(parts[4]), rparts[2].split(",")
        if fstype == "cgroup2":
            v2 = point
        elif fstype == "cgroup":
            for opt in opts:
                if opt in CONTROLLERS + V1_EXTRA:
                    v1[opt] = point
    return v1, v2


def _parse_self(text: str) -> tuple[dict[str, str], str | None]:
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if hid == "0" and names == "":
            v2 = path
        for name in names.split(","):
            if name in CONTROLLERS + V1_EXTRA:
                v1[name] = path
    return v1, v2


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def detect(proc: Path = Path("/proc/self")) -> Layout:
    try:
        v1_mounts, v2_mount = _parse_mounts((proc / "mountinfo").read_text())
        v1_self, v2_self = _parse_self((proc / "cgroup").read_text())
    except OSError as exc:
        return Layout("none", problem=f"cannot read cgroup layout: {exc}")
    v1: dict[str, Path] = {}
    for ctl, mount in v1_mounts.items():
        own = mount / v1_self.get(ctl, "/").lstrip("/")
        if _writable(own):
            v1[ctl] = own / GROUP
    v2: Path | None = None
    v2_ctls: tuple[str, ...] = ()
    if v2_mount is not None and v2_self is not None:
        own = v2_mount / v2_self.lstrip("/")
        try:
            available = (own / "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        wanted = tuple(c for c in CONTROLLERS if c in available and c not in v1_mounts)
        if wanted and _writable(own):
            v2, v2_ctls = own, wanted
    on_v1 = [c for c in CONTROLLERS if c in v1_mounts]
    if not v1 and not v2_ctls:
        where = "v1 hierarchies" if on_v1 else "the v2 hierarchy"
        return Layout("none", problem=f"no writable cgroup for hutch on {where} (not root, no delegation)")
    mode = "v2" if not on_v1 else ("hybrid" if v2_mount is not None else "v1")
    return Layout(mode, v1=v1, v2=v2, v2_controllers=v2_ctls)


def check(layout: Layout) -> CheckResult:
    """``hutch doctor``'s cgroups line."""
    if layout.mode == "none":
        return CheckResult(
            "cgroups",
            False,
            f"{layout.problem}; falling back to rlimits (memory as address space, pids per user, no cpu limit)",
            "run hutch as root, or in a delegated cgroup: systemd-run --user --scope -p Delegate=yes hutch serve",
        )
    return CheckResult("cgroups", True, f"{layout.mode}; enforced: {', '.join(layout.controllers)}")


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _v2_prepare(own: Path, controllers: tuple[str, ...]) -> Path:
    """Enable controllers below ``own``: the daemon moves to a leaf (no internal processes)."""
    want = " ".join("+" + c for c in controllers)
    parent = own / GROUP
    try:
        _write(own / "cgroup.subtree_control", want)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        leaf = own / "hutch-daemon"
        leaf.mkdir(exist_ok=True)
        for pid in (own / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                _write(leaf / "cgroup.procs", pid)
        _write(own / "cgroup.subtree_control", want)
    parent.mkdir(exist_ok=True)
    _write(parent / "cgroup.subtree_control", want)
    return parent


OOM_FILES = ("memory.events", "memory.oom_control")  # v2, v1


def _oom_count(path: str) -> int:
    """The ``oom_kill`` line of a cgroup's events file: one read of raw bytes (a text file
    object costs an exec more than the read itself; these files are a few hundred bytes)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    at = (b"\n" + data).find(b"\noom_kill ")  # at a line's start (not oom_kill_disable, oom_group_kill)
    return 0 if at < 0 else int(data[at + 9 :].split(b"\n", 1)[0])


@dataclass
class SandboxCgroup:
    """The cgroup(s) of one sandbox: one dir per v1 controller, or one v2 dir."""

    dirs: list[Path]
    v2: bool

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def join_files(self) -> list[str]:
        """Where a single-threaded process joins these cgroups by writing ``0``: v1's ``tasks``
        (moving the writing thread: the kernel then skips the global lock that makes a
        ``cgroup.procs`` write wait out an RCU grace period, 4-9 ms here per create), v2's
        ``cgroup.procs`` (its ``cgroup.threads`` refuses a move between domains). With ``v2``,
        the last dir is the v2 one (create's order: a hybrid layout's v1 dirs come first)."""
        out = [str(d / "tasks") for d in self.dirs]
        if self.v2 and out:
            out[-1] = str(self.dirs[-1] / "cgroup.procs")
        return out

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                out.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return out

    def oom_kills(self) -> int:
        """The kernel's count of out-of-memory kills in this cgroup (0 without a memory controller)."""
        found = self.__dict__.get("_oom_file")
        if found is not None:  # where it was found last time: one read on the exec path
            with contextlib.suppress(OSError):
                return _oom_count(found)
        for d in sorted(self.dirs, key=lambda d: "memory" not in d.parts):  # the memory controller's dir first (v1)
            for name in OOM_FILES[::-1] if "memory" in d.parts else OOM_FILES:
                path = str(d / name)
                try:
                    count = _oom_count(path)
                except OSError:
                    continue
                self.__dict__["_oom_file"] = path
                return count
        return 0

    def memory_current(self) -> int | None:
        for d in self.dirs:
            for name in ("memory.current", "memory.usage_in_bytes"):
                with contextlib.suppress(OSError, ValueError):
                    return int((d / name).read_text())
        return None

    def pids_current(self) -> int | None:
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                return int((d / "pids.current").read_text())
        return None

    def cpu_seconds(self) -> float | None:
        """CPU time used: the cgroup's own count (v2 ``cpu.stat``, v1 ``cpuacct.usage``), else
        what its live processes have used (``/proc/PID/stat``; a v1 ``cpu`` without ``cpuacct``)."""
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                for line in (d / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
            with contextlib.suppress(OSError, ValueError):
                return int((d / "cpuacct.usage").read_text()) / 1e9
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in sorted(self.pids())[:256]:
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks if self.dirs else None

    def kill_all(self, deadline: float = 5.0, freeze: bool = True) -> None:
        """SIGKILL every task, until none is left (``freeze=False``: the caller killed the
        sandbox's init first, which ended its pid namespace at once)."""
        self.set_background(False)  # a pool member's idle priority would let its killed tasks wait for cpu
        atomic = False
        for d in self.dirs:
            if (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(d / "cgroup.kill", "1")
                    atomic = True
        if freeze and not atomic:
            # One SIGKILL per task: frozen first, so that no task runs between two kills (with
            # pids wrapped, a run's supervisor would otherwise see its command die and report
            # it killed before the sandbox is gone). Thawed below, once every task has its kill.
            with contextlib.suppress(OSError):
                self.set_frozen(True, deadline=1.0)
        end = time.monotonic() + deadline
        thawed = False
        try:
            while time.monotonic() < end:
                pids = self.pids()
                if not pids:
                    return
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                if not thawed:  # a frozen task dies of its SIGKILL only once thawed
                    thawed = True
                    with contextlib.suppress(OSError):
                        self.set_frozen(False, deadline=1.0)
                # woken as they end; then a look for any forked meanwhile (v1 has no cgroup.kill)
                pidwait.wait_exit(pids, min(0.5, max(0.0, end - time.monotonic())))
        finally:
            if not thawed:  # nothing left to kill: never left frozen
                with contextlib.suppress(OSError):
                    self.set_frozen(False, deadline=1.0)

    def set_background(self, background: bool) -> bool:
        """Run at the lowest cpu priority (a pool member starting and waiting) or the normal one:
        ``cpu.idle`` where the kernel has it, else the least (or the default) share."""
        done = False
        for d in self.dirs:
            for name, low, normal in (("cpu.idle", "1", "0"), ("cpu.shares", "2", "1024"), ("cpu.weight", "1", "100")):
                if (d / name).exists():
                    with contextlib.suppress(OSError):
                        _write(d / name, low if background else normal)
                        done = True
                    break
        return done

    def freezer(self) -> Path | None:
        """The file that freezes this sandbox: v1 ``freezer.state`` or v2 ``cgroup.freeze``."""
        for d in self.dirs:
            for name in ("freezer.state", "cgroup.freeze"):
                if (d / name).exists():
                    return d / name
        return None

    def set_frozen(self, frozen: bool, deadline: float = 10.0) -> bool:
        """Freeze or thaw every task, waiting until the kernel says it is done; False without a freezer."""
        path = self.freezer()
        if path is None:
            return False
        v1 = path.name == "freezer.state"
        _write(path, ("FROZEN" if frozen else "THAWED") if v1 else ("1" if frozen else "0"))
        end = time.monotonic() + deadline
        while True:
            if v1:
                done = path.read_text().strip() == ("FROZEN" if frozen else "THAWED")
            else:
                done = f"frozen {int(frozen)}" in (path.parent / "cgroup.events").read_text().splitlines()
            if done:
                return True
            if time.monotonic() > end:
                raise OSError(errno.EBUSY, f"{path} did not become {'frozen' if frozen else 'thawed'} in {deadline:.0f}s")
            if v1 and frozen:
                _write(path, "FROZEN")  # v1 may stay FREEZING: asking again retries the stragglers
            time.sleep(0.002)

    def frozen(self) -> bool | None:
        path = self.freezer()
        if path is None:
            return None
        if path.name == "freezer.state":
            return path.read_text().strip() == "FROZEN"
        return "frozen 1" in (path.parent / "cgroup.events").read_text().splitlines()

    def remove(self, deadline: float = 5.0) -> None:
        end = time.monotonic() + deadline
        for d in self.dirs:
            while d.exists():
                try:
                    d.rmdir()
                except OSError as exc:
                    if exc.errno == errno.ENOENT:
                        break
                    if time.monotonic() > end:
                        raise
                    time.sleep(0.01)


def create(
    layout: Layout, name: str, memory: int, pids: int, cpus: float | None, background: bool = False
) -> tuple[SandboxCgroup, dict[str, str]]:
    """Make the sandbox's cgroup(s) and write the limits; returns what is enforced how.
    ``background``: at the lowest cpu priority (a pool member, until it is handed out)."""
    for _, parent in sorted(layout.v1.items()):
        parent.mkdir(exist_ok=True)
        (parent / name).mkdir(exist_ok=True)
    v2_dirs: list[Path] = []
    if layout.v2 is not None and layout.v2_controllers:
        d = _v2_prepare(layout.v2, layout.v2_controllers) / name
        d.mkdir(exist_ok=True)
        v2_dirs.append(d)
    made = SandboxCgroup([p / name for _, p in sorted(layout.v1.items())] + v2_dirs, v2=layout.v2 is not None)
    enforced = set_limits(layout, name, memory, pids, cpus)
    if background:
        made.set_background(True)
    return made, enforced


def _memory_v1(d: Path, memory: int) -> None:
    """memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes: raise the latter first."""
    memsw = d / "memory.memsw.limit_in_bytes"
    order = [d / "memory.limit_in_bytes", memsw]
    with contextlib.suppress(OSError, ValueError):
        if memory > int((d / "memory.limit_in_bytes").read_text()):
            order.reverse()
    for path in order:
        if path == memsw:
            if memsw.exists():
                with contextlib.suppress(OSError):
                    _write(memsw, str(memory))
        else:
            _write(path, str(memory))


def set_limits(layout: Layout, name: str, memory: int, pids: int, cpus: float | None) -> dict[str, str]:
    """Write the limits of the existing cgroup(s) ``name`` (at create, or on a live sandbox:
    a pool member handed out); returns what is enforced how. ``cpus`` None sets no cpu limit."""
    enforced: dict[str, str] = {}
    for ctl, parent in sorted(layout.v1.items()):
        d = parent / name
        if ctl == "memory":
            _memory_v1(d, memory)
            enforced["memory"] = "cgroup v1"
        elif ctl == "pids":
            _write(d / "pids.max", str(pids))
            enforced["pids"] = "cgroup v1"
        elif ctl == "cpu" and cpus is not None:
            _write(d / "cpu.cfs_period_us", "100000")
            _write(d / "cpu.cfs_quota_us", str(max(1000, int(cpus * 100000))))
            enforced["cpus"] = "cgroup v1"
        elif ctl == "freezer":
            enforced["pause"] = "cgroup v1 freezer"
    if layout.v2 is not None and layout.v2_controllers:
        d = layout.v2 / GROUP / name
        if "memory" in layout.v2_controllers:
            _write(d / "memory.max", str(memory))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            enforced["memory"] = "cgroup v2"
        if "pids" in layout.v2_controllers:
            _write(d / "pids.max", str(pids))
            enforced["pids"] = "cgroup v2"
        if "cpu" in layout.v2_controllers and cpus is not None:
            _write(d / "cpu.max", f"{max(1000, int(cpus * 100000))} 100000")
            enforced["cpus"] = "cgroup v2"
        if "pause" not in enforced and (d / "cgroup.freeze").exists():
            enforced["pause"] = "cgroup v2 freeze"
    return enforced


@functools.lru_cache(maxsize=4096)
def of(dirs: tuple[str, ...]) -> SandboxCgroup:
    """A sandbox's cgroup from its recorded dirs, made once (the exec path asks for it each run)."""
    return SandboxCgroup([Path(d) for d in dirs], v2=False)
