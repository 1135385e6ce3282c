"""Container peers: podman with runc, gVisor's ``runsc do`` and bare ``runc run``, on a busybox root.

Each is an optional peer of bench/peers.py: installed from the distribution's packages
(``apt-get install``) when its command is missing and the harness runs as root with apt,
else reported as "not measured: <reason>". Their state (podman's storage and run root,
runsc's and runc's state dirs, the busybox root filesystem, runc's bundle) lives in the
harness's temp dir, never in the system's default places. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from peers import NotMeasuredError, Peer, run_tool, sanitize

APT_TIMEOUT = 900.0
# runc cannot raise a limit above what the calling process holds, and podman's defaults for
# root (nofile 1048576, nproc = the host's) are refused where CAP_SYS_RESOURCE is missing.
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]


def ensure_command(command: str, packages: list[str]) -> tuple[str, str]:
    """The path of ``command``, installing ``packages`` with apt-get when it is missing (root only)."""
    found = shutil.which(command)
    if found:
        return found, "the distribution's package, already installed"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise NotMeasuredError(f"{command} is not installed (apt-get install {' '.join(packages)} needs root and apt)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_tool(
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", *packages],
        f"apt-get install {' '.join(packages)}",
        timeout=APT_TIMEOUT,
        env=env,
    )
    found = shutil.which(command)
    if not found:
        raise NotMeasuredError(f"apt-get install {' '.join(packages)} did not provide {command}")
    return found, f"apt-get install {' '.join(packages)} (by the harness)"


def version_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.strip().splitlines()[0] if out.strip() else "?"


def busybox_root(path: Path) -> Path:
    """A minimal root filesystem: a static busybox and the applets the peers run."""
    busybox = shutil.which("busybox")
    if not busybox:
        raise NotMeasuredError("busybox is not installed (apt-get install busybox-static)")
    probe = subprocess.run(["ldd", busybox], capture_output=True, text=True, check=False)
    if "not a dynamic executable" not in probe.stdout + probe.stderr:
        raise NotMeasuredError(f"{busybox} is linked dynamically; the busybox root needs busybox-static")
    (path / "bin").mkdir(parents=True)
    shutil.copy2(busybox, path / "bin" / "busybox")
    for applet in ("true", "sleep", "sh"):
        (path / "bin" / applet).symlink_to("busybox")
    for sub in ("proc", "sys", "dev", "etc", "tmp"):
        (path / sub).mkdir()
    return path


def timed(argv: list[str], what: str, **kw: object) -> float:
    t0 = time.perf_counter_ns()
    r = subprocess.run(argv, capture_output=True, check=False, **kw)  # type: ignore[call-overload]
    t1 = time.perf_counter_ns()
    if r.returncode != 0:
        raise RuntimeError(f"{what} exited {r.returncode}: {sanitize(r.stderr.decode(errors='replace'))}")
    return (t1 - t0) / 1e6


class Podman(Peer):
    """``podman run --rm --runtime runc`` on a busybox root without network, and ``podman exec``."""

    name = "podman (runc)"
    keys = ("podman_run", "podman_exec")

    def __init__(self, root: Path) -> None:
        super().__init__(root / "podman")
        self.cid: str | None = None
        self.base: list[str] = []

    def install(self) -> None:
        podman, how = ensure_command("podman", ["podman", "runc"])
        runc, _ = ensure_command("runc", ["runc"])
        self.root.mkdir(parents=True)
        rootfs = busybox_root(self.root / "rootfs")
        self.base = [
            podman,
            "--root", str(self.root / "storage"),
            "--runroot", str(self.root / "run"),
            "--tmpdir", str(self.root / "tmp"),
            "--cgroup-manager", "cgroupfs",  # no systemd here; these machines' cgroups are hybrid
            "--events-backend", "file",
        ]  # fmt: skip
        shape = ["--runtime", runc, "--network", "none", *ULIMITS, "--rootfs", str(rootfs)]
        self.run_argv = [*self.base, "run", "--rm", *shape, "/bin/true"]
        started = run_tool([*self.base, "run", "-d", *shape, "/bin/sleep", "1000000"], "podman run -d (the exec target)", 120)
        self.cid = started.stdout.strip().splitlines()[-1]
        self.exec_argv = [*self.base, "exec", self.cid, "/bin/true"]
        self.info |= {
            "version": f"{version_line([podman, '--version'])}; {version_line([runc, '--version'])}",
            "installed": how,
            "timed": "whole processes: `podman run --rm --runtime runc --network none --rootfs BUSYBOX /bin/true` "
            "(like `hutch run -- true`) and `podman exec CID /bin/true` in a running container (like `hutch exec`)",
            "settings": "runc (crun refuses hybrid cgroups), cgroupfs, no network, a static busybox root, "
            "storage and run root in the harness's temp dir, nofile/nproc lowered (no CAP_SYS_RESOURCE here)",
        }
        self.run_once()
        self.exec_once()

    def run_once(self) -> float:
        return timed(self.run_argv, "podman run")

    def exec_once(self) -> float:
        return timed(self.exec_argv, "podman exec")

    def samplers(self) -> dict[str, Callable[[], float]]:
        return {"podman_run": self.run_once, "podman_exec": self.exec_once}

    def close(self) -> None:
        if self.cid is None:
            return
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([*self.base, "rm", "-f", "-t", "0", self.cid], capture_output=True, timeout=120, check=False)
        self.cid = None


class Runsc(Peer):
    """gVisor's ``runsc --network=none do /bin/true`` (the host's root through gVisor's kernel)."""

    name = "gVisor runsc"
    keys = ("runsc_do",)

    def __init__(self, root: Path) -> None:
        super().__init__(root / "runsc")

    def install(self) -> None:
        runsc, how = ensure_command("runsc", ["runsc"])
        self.root.mkdir(parents=True)
        # `do` refuses the root network namespace with networking on: no network, like the others.
        self.argv = [runsc, "--root", str(self.root / "state"), "--network=none", "do", "/bin/true"]
        self.info |= {
            "version": version_line([runsc, "--version"]),
            "installed": how,
            "timed": "the whole `runsc --network=none do /bin/true` process (like `hutch run -- true`)",
            "settings": "no network, the host's root read-only under gVisor's overlay, state dir in the harness's temp dir",
        }
        self.sample()

    def sample(self) -> float:
        return timed(self.argv, "runsc do", cwd=self.root)

    def samplers(self) -> dict[str, Callable[[], float]]:
        return {"runsc_do": self.sample}


class Runc(Peer):
    """Bare ``runc run`` of ``/bin/true`` from a busybox bundle (what podman drives, without podman)."""

    name = "runc"
    keys = ("runc_run",)

    def __init__(self, root: Path) -> None:
        super().__init__(root / "runc")
        self.count = 0

    def install(self) -> None:
        runc, how = ensure_command("runc", ["runc"])
        self.root.mkdir(parents=True)
        bundle = self.root / "bundle"
        bundle.mkdir()
        busybox_root(bundle / "rootfs")
        run_tool([runc, "spec"], "runc spec", 60, cwd=bundle)
        spec = json.loads((bundle / "config.json").read_text())
        spec["process"] |= {"terminal": False, "args": ["/bin/true"]}
        spec["root"] = {"path": "rootfs", "readonly": True}
        (bundle / "config.json").write_text(json.dumps(spec))  # the default spec has a network namespace: only lo
        self.runc, self.bundle = runc, bundle
        self.info |= {
            "version": version_line([runc, "--version"]),
            "installed": how,
            "timed": "the whole `runc run --bundle B ID` process, `runc spec`'s defaults (new namespaces, only lo)",
            "settings": "a static busybox root, read-only; state dir in the harness's temp dir",
        }
        self.sample()

    def sample(self) -> float:
        self.count += 1
        argv = [
            self.runc,
            "--root",
            str(self.root / "state"),
            "run",
            "--bundle",
            str(self.bundle),
            f"hb{os.getpid()}-{self.count}",
        ]
        return timed(argv, "runc run", stdin=subprocess.DEVNULL)

    def samplers(self) -> dict[str, Callable[[], float]]:
        return {"runc_run": self.sample}
