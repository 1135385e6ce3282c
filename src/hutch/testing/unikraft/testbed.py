"""The test server's world: instances, their commands, faults, and the local sandboxes behind them.

See :mod:`hutch.testing.unikraft.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from hutch.provider import ExecSpec, Interactive

IMAGES = {"debian-slim:latest", "hutch/sandbox:latest", "nginx:latest"}


class Command:
    def __init__(self, cmdline: str, cwd: str | None, env: dict[str, str] | None) -> None:
        self.uuid = str(uuidlib.uuid4())
        self.run_id = "run_" + self.uuid.replace("-", "")[:20]
        self.cmdline, self.cwd, self.env = cmdline, cwd, env
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.exitcode: int | None = None
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.done = threading.Event()
        self.logs_deleted = False
        self.run_env: dict[str, str] = dict(env or {})


class Instance:
    def __init__(self, name: str, body: dict[str, Any], account: str, sandbox_id: str | None) -> None:
        self.uuid = str(uuidlib.uuid4())
        self.name = name
        self.body = body
        self.account = account
        self.sandbox_id = sandbox_id
        self.created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.state = "running"
        self.wake_until = 0.0
        plugins = [p.get("name") for p in body.get("plugins", []) + body.get("roms", []) if isinstance(p, dict)]
        self.plugin = "sandbox" in plugins or any("sandbox" in str(p.get("image", "")) for p in body.get("roms", []))
        self.commands: dict[str, Command] = {}

    def view(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "name": self.name,
            "created_at": self.created_at,
            "state": self.state,
            "image": self.body.get("image", ""),
            "memory_mb": int(self.body.get("memory_mb", 128)),
            "env": dict(self.body.get("env") or {}),
            "private_fqdn": f"{self.name}.internal",
        } | ({"service_group": self.service_group()} if self.body.get("service_group") else {})

    def service_group(self) -> dict[str, Any]:
        """An ephemeral service group as the platform answers it (the fqdn the ssh front serves)."""
        return {"uuid": self.uuid, "name": f"{self.name}-sg", "domains": [{"fqdn": f"{self.name}.ukc.test."}]}


class Backend:
    """Local hutch sandboxes driven from one long-lived event loop thread."""

    def __init__(self, kind: str, home: Path) -> None:
        from hutch.config import Settings
        from hutch.service import Service

        self.kind = kind
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ukc-testserver-loop", daemon=True)
        self.thread.start()
        self.svc = Service(Settings.load(home=home, provider=kind))

    def call(self, coro: Any, timeout: float | None = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def create(self, memory_mb: int) -> str:
        from hutch.models import Limits, SandboxSpec

        spec = SandboxSpec(provider=self.kind, limits=Limits(memory=max(memory_mb, 64) << 20))
        return str(self.call(self.svc.create(spec)).id)

    def destroy(self, sandbox_id: str) -> None:
        self.call(self.svc.destroy(sandbox_id))

    def start(self, inst: Instance, cmd: Command) -> None:
        async def run() -> None:
            rec = self.svc.get(inst.sandbox_id or "")
            prov = self.svc.provider(rec.provider)

            async def collect(stream: str, chunk: bytes) -> None:
                cmd.out[stream] += chunk

            try:
                spec = ExecSpec(
                    run_id=cmd.run_id,
                    argv=["/bin/sh", "-c", cmd.cmdline],
                    env=cmd.run_env,
                    cwd=cmd.cwd or "/",
                    max_output=16 << 20,
                    on_output=collect,
                    interactive=Interactive(cmd.inbox) if self.kind == "local" else None,
                )
                raw = await prov.exec(rec, spec)
                if self.kind != "local":  # the fake provider does not stream
                    cmd.out["stdout"][:] = raw.stdout
                    cmd.out["stderr"][:] = raw.stderr
                cmd.exitcode = raw.exit_code
            except Exception as exc:  # noqa: BLE001 - reported as the command's failure
                cmd.out["stderr"] += f"sandbox plugin: {exc}\n".encode()
                cmd.exitcode = 127
            finally:
                cmd.done.set()

        asyncio.run_coroutine_threadsafe(run(), self.loop)

    def signal(self, inst: Instance, cmd: Command, sig: int) -> None:
        rec = self.svc.get(inst.sandbox_id or "")
        self.call(self.svc.provider(rec.provider).kill_run(rec, cmd.run_id, sig))

    def read(self, inst: Instance, path: str) -> bytes:
        rec = self.svc.get(inst.sandbox_id or "")
        data, _ = self.call(self.svc.provider(rec.provider).read_file(rec, path, 64 << 20))
        return bytes(data)

    def write(self, inst: Instance, path: str, data: bytes) -> None:
        rec = self.svc.get(inst.sandbox_id or "")
        self.call(self.svc.provider(rec.provider).write_file(rec, path, data, 0o644))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            for rec in self.svc.list():
                self.call(self.svc.destroy(rec.id), 60)
        self.call(self.svc.close(), 30)
        self.loop.call_soon_threadsafe(self.loop.stop)


class State:
    def __init__(self, tokens: dict[str, str], backend: Backend | None) -> None:
        self.tokens = tokens
        self.backend = backend
        self.lock = threading.RLock()
        self.instances: dict[str, Instance] = {}
        self.faults: dict[str, Any] = {}
        self.creates = 0
        self.deletes = 0
        self.log: list[dict[str, Any]] = []
        self.ssh: Any = None  # the SSH front (sshserver.SSHFront), when asyncssh is installed

    def take(self, fault: str) -> bool:
        """Consume one unit of a counted fault."""
        with self.lock:
            n = int(self.faults.get(fault) or 0)
            if n > 0:
                self.faults[fault] = n - 1
                return True
            return False

    def quota(self) -> int:
        hard = self.faults.get("quota_instances")
        return 100 if hard is None else int(hard)

    def by_ref(self, ref: str, account: str) -> Instance | None:
        with self.lock:
            for inst in self.instances.values():
                if inst.account == account and ref in (inst.uuid, inst.name):
                    return inst
        return None


def envelope(
    data: Any = None, status: str = "success", message: str | None = None, errors: int | None = None, null: bool = False
) -> dict[str, Any]:
    """The spec's envelope. ``data`` is left out when there is none (platform answers), or sent
    as null with ``null`` (the plugin's EmptyResponse, where it is required and nullable)."""
    body: dict[str, Any] = {"status": status, "op_time_us": 7}
    if data is not None or null:
        body["data"] = data
    if message:
        body["message"] = message
    if errors:
        body["errors"] = [{"status": errors}]
    return body
