"""The sandbox's filesystem view as bwrap arguments: the host-``/usr`` view (the default)
or an image's writable root (:mod:`.images.rootfs`), then what every sandbox has the same
way: ``/proc``, ``/dev``, its ``/workspace``, the agent's files, its control and runs
directories, the caller's mounts.

Descriptors the arguments name (memfds, O_PATH fds) are appended to ``fds``; the caller
passes them to bwrap and closes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hutch.providers.local import bwrap as bw
from hutch.providers.local import hold, seccomp
from hutch.providers.local.agent import wire
from hutch.providers.local.host import memfd
from hutch.providers.local.hostpython import SANDBOX_DIR, AgentPython
from hutch.providers.local.images import rootfs
from hutch.providers.local.images.rootfs import ImageRoot

IMAGE_IDENTITY = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")  # an image keeps its own passwd and group


@dataclass(frozen=True)
class Binds:
    """What create opened for the sandbox (O_PATH descriptors) and where it goes."""

    workspace: int
    workspace_readonly: bool
    ctl: int
    runs: int
    mounts: list[tuple[int, str, bool]]
    extra: list[str]  # more bwrap arguments, placed before the root is made read-only (the host CA bundle)


def _identity(fds: list[int], only: tuple[str, ...] | None = None) -> list[str]:
    args: list[str] = []
    for path, content in bw.identity_files().items():
        if only is not None and path not in only:
            continue
        fd = memfd(path, content)
        fds.append(fd)
        # readable by every user of the sandbox (bwrap's default for data is 0600: a run as
        # nobody in a --user root sandbox could not name itself)
        args += ["--perms", "0644", "--ro-bind-data", str(fd), path]
    return args


def _agent_files(agent: AgentPython, files: dict[str, bytes], fds: list[int]) -> list[str]:
    """The agent's package, copied into the sandbox's root (remounted read-only)."""
    args = ["--dir", "/.hutch", "--dir", SANDBOX_DIR, "--dir", f"{SANDBOX_DIR}/__pycache__"]
    for name, content in (files | agent.compiled).items():
        fd = memfd(os.path.basename(name), content)
        fds.append(fd)
        args += ["--perms", "0444", "--file", str(fd), f"{SANDBOX_DIR}/{name}"]
    return args


def _common(binds: Binds) -> list[str]:
    ws = "--ro-bind-fd" if binds.workspace_readonly else "--bind-fd"
    args = [ws, str(binds.workspace), "/workspace"]
    args += ["--bind-fd", str(binds.ctl), "/.hutch/ctl", "--bind-fd", str(binds.runs), "/.hutch/runs"]
    args += binds.extra
    for fd, target, ro in binds.mounts:
        args += ["--ro-bind-fd" if ro else "--bind-fd", str(fd), target]
    return args


def host_view(agent: AgentPython, files: dict[str, bytes], binds: Binds, fds: list[int]) -> tuple[list[str], str]:
    """The default view: the host's ``/usr`` and allowed ``/etc`` read-only, tmpfs /tmp and
    HOME. Returns the arguments and seccomp's enforcement."""
    args = ["--ro-bind", "/usr", "/usr"]
    # /etc made explicitly (its parent-of-a-file default is 0700 under the daemon's umask)
    args += [*bw.root_links(), "--perms", "0755", "--dir", "/etc", *bw.etc_args(), *_identity(fds)]
    if agent.prefix:
        pfd = os.open(agent.prefix, os.O_PATH | os.O_CLOEXEC)
        fds.append(pfd)
        args += ["--ro-bind-fd", str(pfd), agent.prefix]
    agent_args = _agent_files(agent, files, fds)
    seccomp_args, enforcement = seccomp.bwrap_args(fds)
    args += seccomp_args
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(64 << 20), "--tmpfs", "/dev/shm"]
    args += ["--size", str(256 << 20), "--tmpfs", "/tmp", "--size", str(64 << 20), "--tmpfs", bw.SANDBOX_HOME]
    args += ["--chmod", "1777", "/tmp", *agent_args, *_common(binds), "--remount-ro", "/", "--remount-ro", "/dev"]
    return args, enforcement


def image_view(
    root: ImageRoot, placed: list[str], agent: AgentPython, files: dict[str, bytes], binds: Binds, fds: list[int]
) -> tuple[list[str], str]:
    """An image's writable root (``placed``: the arguments of :func:`rootfs.mounted`); the
    /tmp and HOME are on the writable root."""
    args = [*placed]
    args += [*rootfs.view_args(root, fds), *_identity(fds, IMAGE_IDENTITY)]
    seccomp_args, enforcement = seccomp.bwrap_args(fds)
    args += seccomp_args
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(64 << 20), "--tmpfs", "/dev/shm"]
    args += [*_agent_files(agent, files, fds), *_common(binds), "--remount-ro", "/.hutch", "--remount-ro", "/dev"]
    return args, enforcement


def agent_command(agent: AgentPython, root: ImageRoot | None, ready_fd: int, user: list[str], held_by: str | None) -> list[str]:
    """How the agent starts: the host's python3 (through its private runtime in an image), or
    the idle helper that starts it at the first run (``held_by``: the helper is bound)."""
    python = [*(root.runtime.argv() if root is not None else [agent.path]), "-I", "-S", "-B", SANDBOX_DIR]
    sock = "/.hutch/ctl/agent.sock"
    if held_by is not None:
        return [hold.SANDBOX_PATH, str(wire.PROTOCOL), sock, str(ready_fd), *user, "--", *python]
    return [*python, sock, str(ready_fd), *user]
