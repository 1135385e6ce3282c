"""The gvisor runtime's host side: finding ``runsc``, choosing its platform, and the OCI
bundle of a sandbox.

A gvisor sandbox is the same sandbox as a bwrap one seen from the daemon (its directory,
uids, cgroups, writable root, agent and its socket), but its workload talks to gVisor's
Sentry, a kernel in user space, instead of the host's. ``runsc`` is started inside the
sandbox's own user namespace (:mod:`.userns`: as root a range of host uids, as a user the
user and its subordinate uids), so runsc, its Sentry and its gofer are root only there,
and whatever the sandbox writes to its writable root and ``/workspace`` is owned by the
sandbox's host uids, as with bwrap (hutch diff, snapshots and commit read it the same way).
runsc is told ``--ignore-cgroups``: it is started inside the sandbox's cgroups already.

runsc is the Sentry's only way to the outside: ``--network=none`` (a loopback of its own,
no device), and ``--host-uds=all`` for the unix sockets hutch places in the sandbox's
control directory (the agent's socket, which the daemon connects to, and the egress
proxy's, which the agent's relay connects to; :mod:`.agent.relay`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch.errors import UnavailableError

MIN_RELEASE = 20220101  # --host-uds (sockets the sandbox binds, reachable from the host) came in 2022
PROBE_TIMEOUT = 30.0  # runsc do true takes ~0.4 s here (ptrace, the last resort, gets this long under load)
FAST_TIMEOUT = 8.0  # kvm and systrap: kvm where it cannot work (a PVM host) hangs instead of failing
CACHE = "gvisor-platform.json"  # in the state directory: the probe's answer, per runsc binary and kernel
INSTALL_HINT = "install gVisor's runsc (Debian/Ubuntu: apt-get install runsc), or set HUTCH_RUNSC to its path"
PLATFORMS = ("kvm", "systrap", "ptrace")  # the order auto tries them in (the fastest first)
_lock = threading.Lock()
_found: dict[tuple[str, str], Runsc] = {}


@dataclass(frozen=True)
class Runsc:
    path: str
    release: int  # e.g. 20221219
    platform: str
    platforms: tuple[str, ...]  # what this runsc knows
    why: str = ""  # why auto did not take a faster platform

    def describe(self) -> str:
        text = f"runsc {self.release} ({self.path}), platform {self.platform}"
        return text + (f"; {self.why}" if self.why else "")


def _release(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=15, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnavailableError(f"cannot run {path}: {exc}", hint=INSTALL_HINT) from exc
    m = re.search(r"(20\d{6})", out)
    if not m:
        raise UnavailableError(f"cannot read the version of {path}: {out.strip()!r}", hint=INSTALL_HINT)
    return int(m.group(1))


def _known_platforms(path: str) -> tuple[str, ...]:
    try:
        out = subprocess.run([path, "help", "platforms"], capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return ("ptrace",)
    text = out.stdout + out.stderr
    return tuple(p for p in PLATFORMS if re.search(rf"\b{p}\b", text)) or ("ptrace",)


def _try(path: str, platform: str, timeout: float) -> str:
    """Run ``true`` on ``platform``: '' when it worked, else why not (a hang is killed at the timeout)."""
    state = tempfile.mkdtemp(prefix="hutch-runsc-probe-")
    argv = [path, "--root", state, f"--platform={platform}", "--network=none", "--ignore-cgroups"]
    if os.geteuid() != 0:
        argv.append("--rootless")
    argv += ["do", "/bin/true"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, cwd="/"
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        if proc.returncode == 0:
            return ""
        return out.decode(errors="replace").strip().splitlines()[-1:][0] if out.strip() else f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        return f"it hung (no answer in {timeout:.0f} s)"
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(state, ignore_errors=True)


def _key(path: str, platform: str) -> str:
    st = os.stat(path)
    return f"{path} {st.st_size} {st.st_mtime_ns} {platform} {os.uname().release}"


def _cached(cache: Path | None, key: str) -> Runsc | None:
    if cache is None:
        return None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        got = json.loads((cache / CACHE).read_text())
        if got["key"] == key:
            return Runsc(got["path"], int(got["release"]), got["platform"], tuple(got["platforms"]), got["why"])
    return None


def _keep(cache: Path | None, key: str, found: Runsc) -> None:
    if cache is None:
        return
    with contextlib.suppress(OSError):
        tmp = cache / f".{CACHE}.{os.getpid()}"
        tmp.write_text(json.dumps({"key": key, **dataclasses.asdict(found)}))
        os.replace(tmp, cache / CACHE)


def find(platform: str = "auto", cache: Path | None = None) -> Runsc:
    """runsc (``HUTCH_RUNSC``, else the PATH), new enough, and a platform that runs ``true`` here
    (``auto``: kvm where /dev/kvm opens, then systrap where this runsc knows it, then ptrace). Found once per
    process (and the platform kept in ``cache``, a directory, per binary and kernel); fails closed with the
    install command or the platform's reason."""
    path = os.environ.get("HUTCH_RUNSC") or shutil.which("runsc", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not path or not os.access(path, os.X_OK):
        where = f" ({path} is not an executable)" if path else ""
        raise UnavailableError(f"the gvisor runtime needs runsc, which was not found{where}", hint=INSTALL_HINT)
    with _lock:
        key = _key(path, platform)
        found = _found.get((path, platform)) or _cached(cache, key)
        if found is not None:
            _found[(path, platform)] = found
            return found
        release = _release(path)
        if release < MIN_RELEASE:
            raise UnavailableError(
                f"{path} is release {release}; the gvisor runtime needs {MIN_RELEASE} or newer (--host-uds)",
                hint=INSTALL_HINT,
            )
        known = _known_platforms(path)
        if platform != "auto":
            if platform not in known:
                raise UnavailableError(
                    f"runsc {release} does not know the {platform} platform (it knows {', '.join(known)})",
                    hint="set gvisor_platform = auto, or one of those",
                )
            why = _try(path, platform, PROBE_TIMEOUT)
            if why:
                raise UnavailableError(
                    f"runsc cannot run a sandbox on the {platform} platform here: {why}",
                    hint="set gvisor_platform = auto (hutch then takes the first platform that works)",
                )
            found = Runsc(path, release, platform, known)
        else:
            skipped: list[str] = []
            for candidate in [p for p in PLATFORMS if p in known]:
                if candidate == "kvm" and not os.access("/dev/kvm", os.R_OK | os.W_OK):
                    skipped.append("kvm: /dev/kvm cannot be opened")
                    continue
                why = _try(path, candidate, PROBE_TIMEOUT if candidate == "ptrace" else FAST_TIMEOUT)
                if not why:
                    found = Runsc(path, release, candidate, known, "; ".join(skipped))
                    break
                skipped.append(f"{candidate}: {why}")
            if found is None:
                raise UnavailableError(
                    f"runsc cannot run a sandbox here on any platform ({'; '.join(skipped)})",
                    hint="see runsc's logs with --debug, or run hutch doctor",
                )
        _found[(path, platform)] = found
        _keep(cache, key, found)
        return found


def capabilities(names: tuple[str, ...]) -> dict[str, list[str]]:
    return {k: list(names) for k in ("bounding", "effective", "permitted")}


def bundle(
    root: str,
    readonly_root: bool,
    argv: list[str],
    env: dict[str, str],
    mounts: list[dict[str, Any]],
    caps: tuple[str, ...],
) -> dict[str, Any]:
    """The OCI config of a sandbox: its root, its agent as the process, its mounts; namespaces are
    the Sentry's own (nothing of the host's is shared)."""
    base = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "size=64m"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": argv,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/",
            "capabilities": capabilities(caps),
            "noNewPrivileges": True,
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 65536}],
        },
        "root": {"path": root, "readonly": readonly_root},
        "hostname": "sandbox",
        "mounts": base + mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }


def bind(source: str | Path, target: str, readonly: bool) -> dict[str, Any]:
    return {"destination": target, "type": "bind", "source": str(source), "options": ["rbind", "ro" if readonly else "rw"]}


def tmpfs(target: str, size: int, mode: str = "1777") -> dict[str, Any]:
    options = ["nosuid", "nodev", f"size={size}", f"mode={mode}"]
    return {"destination": target, "type": "tmpfs", "source": "tmpfs", "options": options}


def run_argv(found: Runsc, state: Path, bundle_dir: Path, pid_file: Path, container: str, logs: Path) -> list[str]:
    """``runsc run --detach``: returns once the sandbox runs; the Sentry and its gofer stay behind. Their
    logs (info level) go to ``logs``: the Sentry's (``*.boot.txt``) names each system call it does not
    implement (``Unsupported syscall NAME(...)``), the reason a workload's program got ENOSYS."""
    flags = [f"--root={state}", f"--platform={found.platform}", "--network=none", "--host-uds=all", "--ignore-cgroups"]
    flags.append(f"--debug-log={logs}/")
    return [found.path, *flags, "run", "--detach", f"--bundle={bundle_dir}", f"--pid-file={pid_file}", container]
