"""The node side: a Ray actor, one per node, that keeps the node's hutch daemon running.

The gateway (the only Ray driver) makes one detached actor per Ray node, pinned to it
(:mod:`hutch.providers.cluster.driver`). The actor starts ``hutch serve --listen NODE_IP:0``
with the local provider in the node's own state directory (``HUTCH_NODE_HOME``, else
``node`` under the node's ``HUTCH_HOME`` or hutch's default), behind TLS (a certificate for
the node's address, made with :mod:`hutch.pki`) and a bearer token made here. It answers the
gateway's :meth:`NodeDaemon.info`: the daemon's URL, its CA, the token, the node's hutch
version and how its sandboxes with users of their own map them (``users``). Nothing of this
goes through the gateway's store: a restarted gateway asks again.

The daemon runs in a session of its own: it outlives the actor (and so the sandboxes it
keeps do), and a restarted actor finds it by its pid file and reuses it. This module runs on
the node, imported by Ray's worker there; it imports no Ray itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hutch._version import __version__
from hutch.config import default_home
from hutch.pki import GatewayFiles, init

START_TIMEOUT = 120.0


def node_home() -> Path:
    named = os.environ.get("HUTCH_NODE_HOME")
    if named:
        return Path(named)
    base = os.environ.get("HUTCH_HOME")
    return Path(base) / "node" if base else default_home() / "node"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def users_map() -> str:
    """How the node's daemon (this process's user) maps a sandbox with users of its own, as its
    local provider does: ``range`` (root: 65,536 host uids of its own), ``subuid`` (a normal user
    with subordinate ids) or ``single`` (only root inside, the user itself)."""
    if os.geteuid() == 0:
        return "range"
    from hutch.providers.local.userns import user_mapping

    return user_mapping().how


class NodeDaemon:
    """Made by Ray on one node (``ray.remote`` is applied by the gateway)."""

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.home = node_home()
        self.home.mkdir(parents=True, exist_ok=True, mode=0o755)
        self.proc: subprocess.Popen[bytes] | None = None
        self.announced = self._start()

    def _token(self) -> str:
        path = self.home / "node.token"
        if not path.is_file():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        return path.read_text().strip()

    def _start(self) -> dict[str, Any]:
        self._token()
        kept = self.home / "node.json"
        if kept.is_file():  # a daemon this node started before (the actor was restarted)
            with contextlib.suppress(ValueError, KeyError, OSError):
                doc = json.loads(kept.read_text())
                if doc["ip"] == self.ip and _alive(int(doc["pid"])):
                    return dict(doc)
        files = GatewayFiles.of(self.home)
        if not files.server_cert.is_file():
            init(files, [self.ip], f"https://{self.ip}")
        env = dict(os.environ) | {"HUTCH_HOME": str(self.home), "HUTCH_PROVIDER": "local"}
        for name in ("HUTCH_HOST", "HUTCH_CLUSTER", "HUTCH_LISTEN", "HUTCH_TOKEN_FILE", "HUTCH_API_TOKEN_FILE"):
            env.pop(name, None)
        argv = [sys.executable, "-m", "hutch", "serve", "--json", "--listen", f"{self.ip}:0"]
        argv += ["--token-file", str(self.home / "node.token")]
        announce = self.home / "node-announce.json"
        announce.unlink(missing_ok=True)
        with open(self.home / "node-daemon.log", "ab") as log, open(announce, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while not announce.read_bytes().endswith(b"\n"):  # {"serving": true, "listen": URL ...} once it accepts
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.home / "node-daemon.log").read_bytes()[-2000:].decode(errors="replace")
                raise RuntimeError(f"the node's hutch daemon did not start: {tail}")
            time.sleep(0.05)
        url = str(json.loads(announce.read_text())["listen"])
        doc = {"ip": self.ip, "pid": self.proc.pid, "url": url, "started_at": time.time()}
        kept.write_text(json.dumps(doc))
        return doc

    def info(self) -> dict[str, Any]:
        """What the gateway needs to reach this node's daemon."""
        files = GatewayFiles.of(self.home)
        return self.announced | {
            "version": __version__,
            "token": self._token(),
            "ca": files.ca_cert.read_text(),
            "home": str(self.home),
            "alive": self._running(),
            "users": users_map(),
        }

    def _running(self) -> bool:
        if self.proc is not None and self.proc.pid == int(self.announced["pid"]):
            return self.proc.poll() is None  # our child: reaped here (a killed one is not left a zombie)
        return _alive(int(self.announced["pid"]))

    def restart(self) -> dict[str, Any]:
        """Start the daemon again when it is gone (the gateway found it unreachable)."""
        if not self._running():
            (self.home / "node.json").unlink(missing_ok=True)
            self.announced = self._start()
        return self.info()
