"""Peers measured on this machine, installed into the harness's own throwaway directory.

Nothing is installed system-wide: sandbox-runtime goes into ``DIR/srt`` with npm (its
Linux helpers socat and ripgrep, when not on PATH, are unpacked from the distribution's
packages with ``apt-get download`` + ``dpkg -x``), SWE-ReX into a venv at ``DIR/swerex``. The container
peers (podman, runsc, runc) are in bench/peers_oci.py.
A peer that cannot be installed or run raises :class:`NotMeasuredError` with the reason, which
the report prints as "not measured: <reason>". Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTALL_TIMEOUT = 600.0


class NotMeasuredError(Exception):
    """The peer could not be installed or run; the message is the reason."""


def sanitize(text: str, limit: int = 300) -> str:
    """One line of tool output for the report: no URLs or host names, bounded."""
    text = re.sub(r"\w+://\S+", "<url>", text)
    text = re.sub(r"\b(?:[a-z0-9-]+\.)+(?:org|com|net|io|dev)\b", "<host>", text, flags=re.IGNORECASE)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.startswith("WARNING")]
    return (lines[-1] if lines else "")[:limit]


def run_tool(argv: list[str], what: str, timeout: float = INSTALL_TIMEOUT, **kw: Any) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    except FileNotFoundError as exc:
        raise NotMeasuredError(f"{what}: {argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise NotMeasuredError(f"{what}: timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise NotMeasuredError(f"{what} exited {proc.returncode}: {sanitize(proc.stderr or proc.stdout)}")
    return proc


class Peer:
    """One peer: ``install`` once, then ``samplers`` (metric key -> one timed sample in ms)."""

    name = ""
    keys: tuple[str, ...] = ()

    def __init__(self, root: Path) -> None:
        self.root = root
        self.info: dict[str, Any] = {"name": self.name}

    def install(self) -> None:
        raise NotImplementedError

    def samplers(self) -> dict[str, Callable[[], float]]:
        raise NotImplementedError

    def close(self) -> None:
        """Stop whatever the peer left running (only processes this harness started)."""


class SandboxRuntime(Peer):
    """Anthropic's sandbox-runtime: its ``srt`` CLI wrapping ``true`` (bwrap + seccomp + no network)."""

    name = "sandbox-runtime"
    keys = ("srt_true",)
    package = "@anthropic-ai/sandbox-runtime"

    def __init__(self, root: Path, bwrap: str) -> None:
        super().__init__(root / "srt")
        self.bwrap = bwrap
        self.env: dict[str, str] = {}

    def _helpers(self) -> tuple[str, str]:
        """socat and rg: from PATH, else unpacked from the distribution's packages into our dir."""
        socat, rg = shutil.which("socat"), shutil.which("rg")
        if socat and rg:
            self.info["helpers"] = "socat and rg from PATH"
            return socat, rg
        if not shutil.which("apt-get") or not shutil.which("dpkg"):
            raise NotMeasuredError("srt needs socat and ripgrep: not on PATH, and no apt-get/dpkg to fetch them")
        debs, unpacked = self.root / "debs", self.root / "debroot"
        debs.mkdir()
        run_tool(["apt-get", "download", "socat", "libwrap0", "ripgrep"], "apt-get download socat libwrap0 ripgrep", cwd=debs)
        for deb in sorted(debs.glob("*.deb")):
            run_tool(["dpkg", "-x", str(deb), str(unpacked)], f"dpkg -x {deb.name}")
        libs = sorted({str(p.parent) for p in unpacked.rglob("libwrap.so.0")})
        wrapper = self.root / "bin" / "socat"
        wrapper.parent.mkdir()
        wrapper.write_text(
            f'#!/bin/sh\nLD_LIBRARY_PATH={":".join(libs)} exec {unpacked / "usr/bin/socat"} "$@"\n'  # no spaces in our paths
        )
        wrapper.chmod(0o755)
        self.info["helpers"] = "socat, libwrap0 and ripgrep unpacked from the distribution's packages (apt-get download)"
        return str(wrapper), str(unpacked / "usr/bin/rg")

    def install(self) -> None:
        if not shutil.which("npm") or not shutil.which("node"):
            raise NotMeasuredError("node and npm are needed to install it")
        self.root.mkdir(parents=True)
        home = self.root / "home"
        home.mkdir()
        self.env = {**os.environ, "HOME": str(home), "npm_config_cache": str(self.root / "npm-cache")}
        run_tool(
            ["npm", "install", "--prefix", str(self.root), "--no-audit", "--no-fund", "--loglevel=error", self.package],
            f"npm install {self.package}",
            env=self.env,
        )
        meta = json.loads((self.root / "node_modules" / self.package / "package.json").read_text())
        self.srt = str(self.root / "node_modules" / ".bin" / "srt")
        socat, rg = self._helpers()
        self.settings = self.root / "srt-settings.json"
        self.settings.write_text(
            json.dumps(
                {
                    "network": {"allowedDomains": [], "deniedDomains": []},
                    "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []},
                    "bwrapPath": self.bwrap,
                    "socatPath": socat,
                    "ripgrep": {"command": rg},
                }
            )
        )
        self.work = self.root / "work"  # srt scans its working directory for files to protect: keep it empty
        self.work.mkdir()
        self.argv = [self.srt, "--settings", str(self.settings), "true"]
        self.info |= {
            "version": meta.get("version"),
            "installed": f"npm install {self.package} (into the harness's temp dir)",
            "bwrap": f"{self.bwrap} (the bwrap hutch uses, through srt's bwrapPath setting)",
            "settings": "no network (allowedDomains empty), no writes allowed",
            "timed": "the whole `srt --settings FILE true` process, like `hutch run -- true`",
            "runs_as": f"the harness's user ({'root' if os.geteuid() == 0 else 'not root'} here): srt does not change uid",
        }
        # It must really sandbox: a network namespace of its own.
        probe = run_tool(
            [self.srt, "--settings", str(self.settings), "-c", "readlink /proc/self/ns/net"],
            "srt probe",
            timeout=60,
            cwd=self.work,
            env=self.env,
        )
        if probe.stdout.strip() == os.readlink("/proc/self/ns/net"):
            raise NotMeasuredError("srt ran the command in the host's network namespace (not sandboxed)")
        self.sample()

    def sample(self) -> float:
        t0 = time.perf_counter_ns()
        r = subprocess.run(self.argv, cwd=self.work, env=self.env, capture_output=True, check=False)
        t1 = time.perf_counter_ns()
        if r.returncode != 0:
            raise RuntimeError(f"srt true exited {r.returncode}: {sanitize(r.stderr.decode(errors='replace'))}")
        return (t1 - t0) / 1e6

    def samplers(self) -> dict[str, Callable[[], float]]:
        return {"srt_true": self.sample}


DRIVER = r'''
"""SWE-ReX driver: times one runtime call per request line on stdin, answers one JSON line."""
import asyncio, json, os, secrets, socket, subprocess, sys, time
from importlib.metadata import version
from swerex.runtime.abstract import BashAction, Command, CreateBashSessionRequest
from swerex.runtime.local import LocalRuntime
from swerex.runtime.remote import RemoteRuntime

async def main():
    local = LocalRuntime()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    token = secrets.token_hex(16)
    server = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "swerex-remote"), "--host", "127.0.0.1", "--port", str(port),
         "--auth-token", token],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        remote = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token)
        await remote.wait_until_alive(timeout=60)
        await local.create_session(CreateBashSessionRequest())
        print(json.dumps({"ready": True, "version": version("swe-rex"), "server_pid": server.pid}), flush=True)
        for line in sys.stdin:
            what = line.strip()
            if what == "quit":
                break
            t0 = time.perf_counter_ns()
            if what == "local":
                code = (await local.execute(Command(command=["true"]))).exit_code
            elif what == "remote":
                code = (await remote.execute(Command(command=["true"]))).exit_code
            else:
                code = (await local.run_in_session(BashAction(command="true"))).exit_code
            t1 = time.perf_counter_ns()
            print(json.dumps({"ms": (t1 - t0) / 1e6, "exit_code": code}), flush=True)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

asyncio.run(main())
'''


class SweRex(Peer):
    """SWE-ReX (SWE-agent's runtime): exec round trips through its runtime API, on the host."""

    name = "SWE-ReX"
    keys = ("swerex_exec", "swerex_remote_exec", "swerex_session")

    def __init__(self, root: Path) -> None:
        super().__init__(root / "swerex")
        self.proc: subprocess.Popen[str] | None = None
        self.server_pid: int | None = None

    def install(self) -> None:
        venv = self.root / "venv"
        base = getattr(sys, "_base_executable", sys.executable)
        run_tool([base, "-m", "venv", str(venv)], "python -m venv")
        python = str(venv / "bin" / "python")
        # swe-rex 1.4.0's RemoteRuntime imports aiohttp, which its package does not declare.
        run_tool(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "swe-rex", "aiohttp"],
            "pip install swe-rex aiohttp",
        )
        driver = self.root / "driver.py"
        driver.write_text(DRIVER)
        work = self.root / "work"
        work.mkdir()
        self.proc = subprocess.Popen(
            [python, str(driver)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=work,
            start_new_session=True,  # a Ctrl-C at the terminal reaches the harness only; it stops us
        )
        ready = self._read(90.0)
        if not ready.get("ready"):
            raise NotMeasuredError(f"the SWE-ReX driver did not start: {ready}")
        self.server_pid = int(ready["server_pid"])
        self.info |= {
            "version": ready.get("version"),
            "installed": "python -m venv + pip install swe-rex aiohttp (into the harness's temp dir)",
            "timed": "one runtime call, timed inside the driver process (like the SDK metrics)",
            "isolation": "none: SWE-ReX's local runtime runs commands directly on the host "
            "(it expects to run inside a container the deployment provides)",
        }

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            err = ""
            if self.proc.poll() is not None and self.proc.stderr is not None:
                err = sanitize(self.proc.stderr.read())
            raise NotMeasuredError(f"the SWE-ReX driver stopped answering{': ' + err if err else ''}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _call(self, what: str) -> float:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        answer = self._read(60.0)
        if answer.get("exit_code") != 0:
            raise RuntimeError(f"SWE-ReX {what} exec of true: {answer}")
        return float(answer["ms"])

    def samplers(self) -> dict[str, Callable[[], float]]:
        return {
            "swerex_exec": lambda: self._call("local"),
            "swerex_remote_exec": lambda: self._call("remote"),
            "swerex_session": lambda: self._call("session"),
        }

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.write("quit\n")
                proc.stdin.flush()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.proc = None
        if proc.returncode != 0 and self.server_pid is not None:
            # The driver did not stop its server: stop it by the pid it reported, if it is still that server.
            try:
                cmdline = Path(f"/proc/{self.server_pid}/cmdline").read_bytes()
            except OSError:
                return
            if b"swerex-remote" in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.server_pid, signal.SIGKILL)
