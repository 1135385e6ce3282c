"""Start the local daemon on demand: ``hutch serve`` in the background, once, under a lock.

The clients call it when the socket does not answer (never for ``HUTCH_HOST``), and so
does ``hutch daemon start``. Light on imports on purpose: the CLI imports this on every call.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time

from hutch.config import Settings
from hutch.errors import UnavailableError
from hutch.server.home import prepare_home, socket_answers


def ensure_daemon(settings: Settings) -> None:
    """Start ``hutch serve`` in the background unless it already answers."""
    if socket_answers(settings.socket_path):
        return
    import subprocess  # here: only a call that finds no daemon starts one

    prepare_home(settings.home)
    with open(settings.home / "hutchd.start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if socket_answers(settings.socket_path):
            return
        env = dict(os.environ, HUTCH_HOME=str(settings.home))
        with open(os.open(settings.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hutch", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        deadline = time.monotonic() + settings.daemon_start_timeout
        while time.monotonic() < deadline:
            if socket_answers(settings.socket_path):
                return
            code = proc.poll()
            if code is not None and not socket_answers(settings.socket_path):
                raise UnavailableError(
                    f"the hutch daemon exited during start (code {code}): {log_tail(settings)}",
                    hint=f"see {settings.log_path}, or run it in the foreground: hutch serve",
                )
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise UnavailableError(
            f"the hutch daemon did not answer within {settings.daemon_start_timeout:.0f}s",
            hint=f"see {settings.log_path}; run hutch doctor",
        )


def log_tail(settings: Settings, lines: int = 5) -> str:
    try:
        text = settings.log_path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:])
