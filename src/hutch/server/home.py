"""The daemon's state directory: its mode, its socket, its pid file.

Light on imports on purpose: the CLI (``hutch daemon status``) and the client's launcher
(:mod:`hutch.client.launcher`) read them too.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from hutch.config import Settings, unusable_home


def socket_answers(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def daemon_pid(settings: Settings) -> int | None:
    try:
        pid = int((settings.home / "hutchd.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def prepare_home(home: Path) -> None:
    try:
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o711 if os.geteuid() == 0 else 0o700)
    except OSError as exc:
        raise unusable_home(home, exc) from exc
