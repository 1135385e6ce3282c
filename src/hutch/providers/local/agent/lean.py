"""Back to lean: an idle agent gives its place back to the idle helper (``hold.c``).

An agent started by the helper (``--held=``) whose spare left for idleness, with no run
alive and nothing asked of it for ``spare_idle`` seconds, ``execve``s the helper in place:
the same process (pid, cgroup, uid, seccomp filter, no_new_privs), ~0.1 MiB instead of
~5.5 MiB. Its listening sockets, the egress proxy's listener and what it was configured
with (one ``configure`` frame in a memfd) go along; the helper hands them back the same way
at the next run.
"""

from __future__ import annotations

import os

from . import wire

HOLD = "/.hutch/hold"  # the helper, bound read-only into sandboxes that started with it


def possible(argv: list[str]) -> bool:
    """Whether this agent was started by the helper, which is still there to go back to."""
    return len(argv) > 3 and argv[3].startswith("--held=") and os.access(HOLD, os.X_OK)


def back(sockets: tuple[int, int, int], config: dict[str, object] | None) -> None:
    """Exec the helper with the agent's (server, exec, proxy listener or -1) sockets and its
    configuration; returns only when that cannot be done (the agent then stays)."""
    body = wire.message(config) if config is not None else b""  # (WireError: over a frame; stays)
    state = os.memfd_create("hutch-state", 0)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(state, view) :]
        with open("/proc/self/cmdline", "rb") as f:  # the whole command, a runtime's loader included
            argv = [a.decode("utf-8", "surrogateescape") for a in f.read().split(b"\0")[:-1]]
        python, sock = argv[:-3], argv[-3]  # ... SOCKET -1 --held=...
        server, exec_fd, listener = sockets
        for fd in (server, exec_fd, state, listener):
            if fd >= 0:
                os.set_inheritable(fd, True)
        held = f"--held={server},{exec_fd},{state},{listener}"
        os.execv(HOLD, [HOLD, str(wire.PROTOCOL), sock, "-1", held, "--", *python])
    except OSError:
        for fd in (server, exec_fd, listener):
            if fd >= 0:
                os.set_inheritable(fd, False)
        os.close(state)
