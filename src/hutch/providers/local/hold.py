"""The idle helper: a small static program (``hold.c``) that holds the agent's place in a local sandbox.

A sandbox holds only this helper (about 0.1 MiB) where the Python agent holds ~5.5 MiB. It binds
the agent's sockets, answers what an idle sandbox is asked (``ping``, ``configure``, ``runs``,
``listen``, ``unlisten``, ``kill``), and supervises a plain run itself (``holdrun.c``,
``holdsup.c``: no terminal, no ``--user``), in a fork of itself that
does what the Python supervisor does. On anything else it ``execve``s the Python agent in its
place (same pid, cgroup, uid, seccomp filter and no_new_privs), handing over its sockets, what it
was configured with, the request it read (an exec's connection and stdin too) and its runs alive.

It is built once per source and architecture with the host's C compiler (``musl-gcc``
first: a ~90 KiB binary; else ``cc``/``gcc -static``) into ``HUTCH_HOME/hold/`` (built under
a temporary name and renamed: daemons sharing a home may race, each rename is whole), and
checked by running it (``--check`` answers with the source's key): a cached binary that does
not answer so (cut short, another architecture) is built again. No compiler, a failed build,
or the setting ``idle_agent = python``: sandboxes start the Python agent as before, and
``hutch doctor`` says which and why. A pool member waits in the pool held by the helper too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from hutch.config import Settings
from hutch.provider import CheckResult

SOURCES = tuple(
    Path(__file__).with_name(name) for name in ("hold.c", "holdjson.c", "holdrun.c", "holdsup.c")
)  # hold.c includes the rest
SANDBOX_PATH = "/.hutch/hold"  # where a sandbox sees it
COMPILERS = (("musl-gcc", ["-O2", "-static", "-s"]), ("cc", ["-O2", "-static", "-s"]), ("gcc", ["-O2", "-static", "-s"]))


@dataclass(frozen=True)
class Hold:
    path: str | None  # the helper on the host; None: idle sandboxes run the Python agent
    detail: str  # how it was made, or why there is none


_lock = threading.Lock()
_known: dict[str, Hold] = {}  # directory -> what was found there


def key(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()[:16]


def source_key() -> str:
    """The key of this install's helper source (all its files)."""
    return key(b"".join(path.read_bytes() for path in SOURCES))


def answers(path: Path, want: str) -> bool:
    """Whether the binary at ``path`` runs here and is the build of ``want``."""
    try:
        out = subprocess.run([str(path), "--check"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout == f"hutch-hold {want}\n".encode()


def _build(sources: dict[str, bytes], want: str, root: Path, target: Path) -> str | None:
    """Compile into ``target`` with the first compiler that can; None, or why none could."""
    found = [(cc, flags) for cc, flags in COMPILERS if shutil.which(cc)]
    if not found:
        return "no C compiler (musl-gcc, cc or gcc) on this machine"
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    why = ""
    try:
        for name, text in sources.items():
            (work / name).write_bytes(text)
        for cc, flags in found:
            out = work / "hold"
            args = [cc, *flags, f'-DHOLD_KEY="{want}"', "-o", str(out), str(work / "hold.c")]
            try:
                done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                why = f"{cc}: {exc}"
                continue
            if done.returncode != 0 or not answers(out, want):
                why = f"{cc} could not build it: {(done.stderr.strip().splitlines() or ['the result does not run'])[-1]}"
                continue
            os.chmod(out, 0o755)  # a sandbox's own uid executes it (bound read-only into the sandbox)
            os.replace(out, target)
            for old in root.glob("hold-*"):  # an earlier source's (running sandboxes keep theirs: a bind holds the file)
                if old != target:
                    with contextlib.suppress(OSError):
                        old.unlink()
            return None
        return why
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepare(home: Path, setting: str = "native") -> Hold:
    """The helper for idle sandboxes of the daemon whose home is ``home`` (built at first use)."""
    if setting == "python":
        return Hold(None, "the Python agent (setting idle_agent = python)")
    root = home / "hold"
    with _lock:
        known = _known.get(str(root))
        if known is not None and (known.path is None or os.path.exists(known.path)):
            return known
        try:
            sources = {path.name: path.read_bytes() for path in SOURCES}
        except OSError as exc:
            return Hold(None, f"the Python agent: the helper's source is missing from this install ({exc.strerror})")
        want = key(b"".join(sources.values()))  # (source_key)
        target = root / f"hold-{want}-{platform.machine()}"
        why = None
        if not answers(target, want):  # not built yet, or cut short, or not for this machine: (re)built
            root.mkdir(parents=True, exist_ok=True)
            os.chmod(root, 0o711)  # bwrap, as the sandbox's uid, finds it by its path: searchable, not listable
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            why = _build(sources, want, root, target)
        if why is None:
            size = target.stat().st_size
            known = Hold(
                str(target),
                f"a native helper ({target}, {size // 1024} KiB), which runs plain commands itself; the Python agent "
                "for terminals and --user",
            )
        else:
            known = Hold(None, f"the Python agent: {why}")
        _known[str(root)] = known
        return known


def idle_helper(settings: Settings) -> str | None:
    """The helper a new sandbox starts with (its path on the host), or None: no helper here (the
    Python agent from the start, as ``doctor`` says)."""
    return prepare(settings.home, settings.idle_agent).path


def bind_args(path: str | None, fds: list[int]) -> list[str]:
    """bwrap's arguments binding the helper at ``path`` (None: none) read-only into the sandbox: its
    pages are shared by every sandbox. The descriptor is appended to ``fds`` (the caller closes it)."""
    if path is None:
        return []
    fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
    return ["--ro-bind-fd", str(fds[-1]), SANDBOX_PATH]


def forget() -> None:
    """Drop what this process found (tests)."""
    with _lock:
        _known.clear()


def check(home: Path, setting: str) -> CheckResult:
    """For ``doctor``: which agent idle sandboxes hold, and why."""
    found = prepare(home, setting)
    fix = None
    if found.path is None and setting != "python":
        fix = "install a C compiler (apt-get install musl-tools, or gcc) for ~5 MiB less per sandbox and faster runs"
    return CheckResult("idle agent", True, f"sandboxes hold {found.detail}", fix)
