"""The providers under contract, each behind one in-process Service (see test_contract.py).

A :class:`Target` is one provider, its Service on a long-lived event loop thread (as in the
daemon: background runs go on between calls), and the few provider-specific looks the
suite needs to prove that nothing is left behind. The suite speaks to a Target only in
terms of behaviour (create, exec, start, files ...); this module is the one place that
knows today's Service signatures.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.conftest import Daemon, sweep

from hutch.client import transfer
from hutch.config import Settings
from hutch.errors import HutchError
from hutch.models import ExecRequest, ExecResult, FileEntry, SandboxRecord, SandboxSpec
from hutch.provider import Capabilities, Interactive
from hutch.service import Service
from hutch.service.poolsizes import Shape

T = TypeVar("T")
# "local+pool": the local provider whose sandboxes are warm pool members handed out on create;
# "local+gvisor": the local provider's gvisor runtime (runsc), held to the capabilities it declares
# "cluster": a cluster gateway's Service on a real 3-node Ray cluster (tests/raycluster.py), its
# loop thread in the head's network namespace (the only Ray driver runs there, never on the host's)
PROVIDERS = ["fake", "local", "local+pool", "local+gvisor", "unikraft", "cluster"]
CALL_TIMEOUT = 240.0  # generous: the machine may be loaded
POOL_SIZE = 2


class Target:
    """One provider under contract, driven through its Service."""

    def __init__(
        self,
        name: str,
        home: Path,
        env: dict[str, str],
        server: Any = None,
        pooled: bool = False,
        runtime: str | None = None,
        cluster: Any = None,
    ) -> None:
        self.name = name
        self.runtime = runtime  # the local provider's runtime under contract (None: its default)
        self.extra: dict[str, Any] = {"runtime": runtime} if runtime else {}  # what every spec of this target carries
        self.home = home
        self.env = env  # what a daemon for this provider needs in its environment
        self.server = server  # the Unikraft test server, for unikraft
        self.pooled = pooled  # creates that a pool member can take are handed one (and must be)
        self.cluster = cluster  # the Ray cluster (tests/raycluster.py), for cluster
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"contract-{name}", daemon=True)
        self.thread.start()
        flags: dict[str, Any] = {}
        if cluster is not None:  # the loop's thread (and every thread it makes) in the head's namespace
            self.call(_enter_netns(cluster.head.ns))
            flags = {"cluster": cluster.address, "cluster_detect": "6"}
        self.settings = Settings.load(home=home, provider=name, pool_size=POOL_SIZE if pooled else 0, **flags)
        self.svc = self.call(self._service())

    def daemon(self, home: Path) -> Any:
        """A real daemon for this provider (the restart case): ``start``, ``client``, ``kill9``, ``stop``."""
        if self.cluster is not None:
            from tests.raycluster import Gateway

            return Gateway(self.cluster, home, HUTCH_CLUSTER_DETECT="6")
        return Daemon(home, **self.env)

    async def _service(self) -> Service:
        svc = Service(self.settings)
        if self.pooled:
            svc.pool.start()  # as the daemon does
        return svc

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def capabilities(self) -> Capabilities:
        caps = self.svc.provider(self.name).capabilities.of_runtime(self.runtime)
        assert caps is not None, f"the {self.name} provider has no runtime {self.runtime}"
        return caps

    def image(self) -> str:
        """An image this provider can boot: the test server's own for unikraft, a tiny one imported once for local."""
        if self.name != "local":
            return "debian-slim:latest"  # one the Unikraft test server knows
        name = "contract-tiny:latest"
        if self.svc.images.store.find(name) is None:
            from tests.imagekit import layer_tar

            data = layer_tar({"etc/hello.txt": b"hello from the image\n"})

            async def chunks() -> AsyncIterator[bytes]:
                yield data

            async def imported() -> None:
                async for frame in self.svc.images.import_("rootfs", chunks(), name=name, ref=None):
                    if frame.get("type") == "error":
                        raise HutchError.from_dict(frame)

            self.call(imported())
        return name

    @property
    def real_programs(self) -> bool:
        """Whether commands run real programs (the fake emulates a fixed vocabulary instead)."""
        return self.name != "fake"

    # -- sandboxes ---------------------------------------------------------------------

    def create(self, **spec: Any) -> SandboxRecord:
        full = SandboxSpec(provider=self.name, **(self.extra | spec))
        shape = self.svc.pool.default_shape()
        pooled = self.pooled and Shape.of(full) == shape  # another image is another shape, with no pool here
        if not pooled or self.svc.pool.refusal(full, self.svc.provider(self.name)) is not None:
            return self.call(self.svc.create(full))
        deadline = time.monotonic() + CALL_TIMEOUT
        while not self.svc.pool.idle.get(shape):  # a member for it: the case then tests a pooled sandbox
            assert time.monotonic() < deadline, "no pool member became ready"
            time.sleep(0.05)
        rec = self.call(self.svc.create(full))
        created = self.svc.store.events.all(rec.id, types=["sandbox_created"])
        assert created and created[0]["data"].get("pool") is True, "the create did not take a pool member"
        return rec

    def subagent(self, parent: str, **spec: Any) -> SandboxRecord:
        return self.call(self.svc.lifecycle.subagent(parent, SandboxSpec(provider=self.name, **(self.extra | spec))))

    def get(self, ref: str) -> SandboxRecord:
        return self.svc.get(ref)

    def destroy(self, ref: str) -> dict[str, Any]:
        return self.call(self.svc.destroy(ref))

    def sandbox_ids(self) -> set[str]:
        """Every sandbox ever recorded, in any state."""
        return {r.id for r in self.svc.list(include_all=True)}

    def pause(self, ref: str) -> dict[str, Any]:
        return self.call(self.svc.lifecycle.pause(ref))

    def resume(self, ref: str) -> dict[str, Any]:
        return self.call(self.svc.lifecycle.resume(ref))

    def events(self, sandbox_id: str) -> list[dict[str, Any]]:
        return self.svc.store.events.all(sandbox_id)

    # -- runs ----------------------------------------------------------------------------

    def exec(self, ref: str, command: list[str] | str, **req: Any) -> ExecResult:
        return self.call(self.svc.exec(ref, ExecRequest(command=command, **req)))

    def stream(self, ref: str, command: list[str] | str, **req: Any) -> list[dict[str, Any]]:
        """A foreground run as it streams: every event, in order."""

        async def collect() -> list[dict[str, Any]]:
            return [e async for e in self.svc.runs.stream(ref, ExecRequest(command=command, **req))]

        return self.call(collect())

    def attach(self, ref: str, command: list[str] | str, tty: bool = False) -> Attached:
        """An interactive run: its input is sent while it runs (refusals raise here)."""
        return Attached(self, ref, command, tty)

    def start(self, ref: str, command: list[str] | str, **req: Any) -> dict[str, Any]:
        return self.call(self.svc.runs.start(ref, ExecRequest(command=command, background=True, **req)))

    def run(self, run_id: str) -> dict[str, Any]:
        return self.svc.runs.get(run_id)

    def runs(self, ref: str, status: str | None = None) -> list[dict[str, Any]]:
        return self.svc.runs.list(ref, status)

    def wait(self, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
        return self.call(self.svc.runs.wait(run_id, timeout))

    def poll(self, run_id: str, stdout: int = 0, stderr: int = 0) -> dict[str, Any]:
        return self.call(self.svc.runs.poll(run_id, {"stdout": stdout, "stderr": stderr}, 1 << 20))

    def kill(self, run_id: str, sig: str = "TERM") -> dict[str, Any]:
        return self.call(self.svc.runs.kill(run_id, sig))

    def ps(self, ref: str) -> list[dict[str, Any]]:
        return self.call(self.svc.runs.ps(ref))

    # -- files -----------------------------------------------------------------------------

    def write(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> dict[str, Any]:
        return self.call(self.svc.write_file(ref, path, data, mode))

    def read(self, ref: str, path: str, limit: int = 64 << 20) -> tuple[bytes, bool]:
        return self.call(self.svc.read_file(ref, path, limit))

    def read_range(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        return self.call(self.svc.read_file_range(ref, path, offset, limit))

    def ls(self, ref: str, path: str | None = None) -> list[FileEntry]:
        return self.call(self.svc.list_files(ref, path))

    # -- workspaces ---------------------------------------------------------------------------

    def push(self, ref: str, root: Path) -> dict[str, Any]:
        """What the client does: plan against the kept manifest, send one tar."""
        kept = self.svc.workspaces.manifest(ref)["files"]
        plan = transfer.plan_push(root, [], kept)
        head, _, rest = transfer.push_body(root, plan.manifest, plan.send).partition(b"\n")
        tar = self.home / "push.tar"
        tar.write_bytes(rest[int(head) :])
        try:
            return self.call(self.svc.workspaces.push(ref, plan.manifest, tar if plan.send else None))
        finally:
            tar.unlink(missing_ok=True)

    def pull(self, ref: str) -> bytes:
        path = self.call(self.svc.workspaces.pull(ref))
        try:
            return path.read_bytes()
        finally:
            path.unlink(missing_ok=True)

    def snapshot_save(self, ref: str, name: str) -> Any:
        return self.call(self.svc.workspaces.snapshot_save(ref, name))

    def snapshot_restore(self, name: str) -> SandboxRecord:
        return self.call(self.svc.workspaces.snapshot_restore(name))

    def snapshot_delete(self, name: str) -> dict[str, Any]:
        return self.call(self.svc.workspaces.snapshot_delete(name))

    def snapshot_names(self) -> list[str]:
        return [s.name for s in self.svc.workspaces.snapshots()]

    def fork(self, ref: str, count: int = 1) -> dict[str, Any]:
        return self.call(self.svc.workspaces.fork(ref, count))

    # -- what the provider left behind ------------------------------------------------------

    def leftovers(self, rec: SandboxRecord) -> list[str]:
        """Whatever of ``rec`` still exists at the provider (empty once it is destroyed)."""
        found = []
        if self.name == "fake":
            if rec.id in self.svc.provider("fake").sandboxes:  # type: ignore[attr-defined]
                found.append("the fake still holds its files")
        elif self.name == "local":
            from hutch.providers.local import cgroups

            sdir = self.settings.sandboxes_dir / rec.id
            if sdir.exists():
                found.append(f"directory {sdir}")
            layout = cgroups.detect()
            parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
            found += [f"cgroup {p / rec.id}" for p in parents if (p / rec.id).exists()]
        elif self.name == "cluster":
            node = next(n for n in self.cluster.nodes if n.ip == rec.data.get("node"))
            if (node.home / "sandboxes" / str(rec.data.get("node_sandbox"))).exists():
                found.append(f"sandbox {rec.data.get('node_sandbox')} on node {node.ip}")
        elif self.name == "unikraft":
            names = {i["name"] for i in self.server.state()["instances"]}
            if rec.data.get("instance") in names:
                found.append(f"instance {rec.data['instance']}")
            if self.svc.store.claims.of_sandbox(rec.id) is not None:
                found.append("its claim")
        return found

    def resources(self) -> list[str]:
        """Everything the provider holds at all (sandbox dirs, instances ...): for proving a
        refused request made nothing."""
        if self.name == "fake":
            return sorted(self.svc.provider("fake").sandboxes)  # type: ignore[attr-defined]
        if self.name == "local":
            d = self.settings.sandboxes_dir
            made = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
            members = {m.id for m in self.svc.store.pool.members()}  # recorded before they exist
            return [i for i in made if i not in members]
        if self.name == "cluster":
            dirs = [n.home / "sandboxes" for n in self.cluster.nodes]
            return sorted(f"{d.parent.name}/{p.name}" for d in dirs if d.is_dir() for p in d.iterdir())
        return sorted(i["name"] for i in self.server.state()["instances"])

    def close(self) -> None:
        try:
            for rec in self.svc.list():
                with contextlib.suppress(Exception):
                    self.destroy(rec.id)
            self.call(self.svc.close(), 60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


class Attached:
    """One interactive run of a Target, as a WebSocket client sees it."""

    def __init__(self, target: Target, ref: str, command: list[str] | str, tty: bool) -> None:
        self.loop = target.loop
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()

        async def begin() -> asyncio.Queue[dict[str, Any]]:
            inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            stream = target.svc.runs.stream(ref, ExecRequest(command=command), Interactive(inbox, tty=tty))
            self.events.put(await anext(stream))  # the first step: where a refusal is raised

            async def rest() -> None:
                try:
                    async for event in stream:
                        self.events.put(event)
                finally:
                    self.events.put(None)

            self.task = asyncio.ensure_future(rest())
            return inbox

        self.inbox = target.call(begin())

    def send(self, msg: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.inbox.put_nowait, msg)

    def until(self, done: Callable[[bytes, dict[str, Any]], bool]) -> tuple[bytes, dict[str, Any]]:
        """Output and the last event, once ``done(output so far, event)``."""
        out = b""
        while True:
            event = self.events.get(timeout=CALL_TIMEOUT)
            assert event is not None, "the run's stream ended early"
            if event["type"] in ("stdout", "stderr"):
                out += base64.b64decode(event["data"]) if event["base64"] else event["data"].encode()
            if done(out, event):
                return out, event


async def _enter_netns(ns: str) -> None:
    """This thread into the network namespace ``ns`` (threads it starts later inherit it)."""
    import ctypes

    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
    finally:
        os.close(fd)


@pytest.fixture(scope="module", params=PROVIDERS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    name, _, variant = str(request.param).partition("+")
    pool, runtime = variant == "pool", variant if variant == "gvisor" else None
    # Not under pytest's tmp_path: that is 0700 under root, and sandbox users pass through it.
    home = Path(tempfile.mkdtemp(prefix=f"hutch-contract-{name}-"))
    with pytest.MonkeyPatch.context() as mp, contextlib.ExitStack() as stack:
        stack.callback(subprocess.run, ["rm", "-rf", str(home)], check=False)
        stack.callback(sweep, home)
        for key in list(os.environ):
            if key.startswith("HUTCH_") or key.startswith("UKC_"):
                mp.delenv(key)
        env: dict[str, str] = {}
        server = None
        if name == "unikraft":
            from tests.integration.ukc_support import TOKEN, TestServer

            server = TestServer()
            stack.callback(server.stop)
            env = {
                "HUTCH_UNIKRAFT_TOKEN": TOKEN,
                "UKC_METRO": server.url,
                "HUTCH_UNIKRAFT_SSH_CONNECT": server.ssh_address,
                "HUTCH_UNIKRAFT_CA_FILE": server.ca_file,
            }
            for key, value in env.items():
                mp.setenv(key, value)
        if pool:
            env = {"HUTCH_POOL_SIZE": str(POOL_SIZE)}  # the restart case's daemon keeps one too
        if runtime:
            env = {"HUTCH_RUNTIME": runtime}  # the restart case's creates too
        cluster = request.getfixturevalue("ray_cluster") if name == "cluster" else None
        t = Target(name, home, env, server, pooled=pool, runtime=runtime, cluster=cluster)
        stack.callback(t.close)
        yield t


@pytest.fixture(scope="module")
def shared(target: Target) -> SandboxRecord:
    """One sandbox per provider for the cases that only run commands and write their own files."""
    return target.create(env={"GREETING": "hello from the spec"})


@pytest.fixture
def new(target: Target) -> Iterator[Callable[..., SandboxRecord]]:
    """Make a sandbox of one's own; it is destroyed after the test."""
    made: list[str] = []

    def make(**spec: Any) -> SandboxRecord:
        rec = target.create(**spec)
        made.append(rec.id)
        return rec

    yield make
    for sid in made:
        with contextlib.suppress(Exception):
            target.destroy(sid)
