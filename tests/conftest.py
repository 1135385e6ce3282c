"""Shared fixtures: a real daemon in a throwaway HUTCH_HOME, cleaned up by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hutch.client import Client
from hutch.config import Settings
from hutch.server.home import socket_answers

ROOT = Path(__file__).resolve().parent.parent

# A shell that starts the suite in the background (`.ci/run &`, nohup, some CI runners) hands it SIGINT
# ignored, and an ignored signal stays ignored in every child: the tests that press Ctrl-C on a CLI
# process (or on the benchmark in-process) would then test nothing. Ctrl-C as a user's terminal sends it
# is what they test, so the suite starts from the default: Python's handler here, SIG_DFL in children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def hutch_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a hutch process of ``home``. Its daemon keeps no warm pool unless a
    test asks for one (HUTCH_POOL_SIZE, "" for the default): members would count as
    processes, cgroups and directories of their own in tests about something else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")}
    env["HUTCH_HOME"] = str(home)
    env["HUTCH_POOL_SIZE"] = "0"
    env.update(extra)
    return env


class Daemon:
    """A real ``hutch serve`` process on a unix socket in ``home``."""

    def __init__(self, home: Path, *, argv: Sequence[str] = ("hutch", "serve"), **env: str) -> None:
        self.home = home
        self.argv = list(argv)  # after python -m: hutch serve, or a daemon with a test seam (hutch.testing)
        self.env = hutch_env(home, **env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.settings = Settings.load(home=home)

    def start(self) -> Daemon:
        log = open(self.home / "test-daemon.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([sys.executable, "-m", *self.argv], env=self.env, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while not socket_answers(self.settings.socket_path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start: " + (self.home / "test-daemon.log").read_text()[-2000:])
            time.sleep(0.02)
        return self

    def client(self) -> Client:
        return Client(self.settings, autostart=False)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        # a daemon auto-started by a client in a test is ours too: end it by its pid file
        pid_file = self.home / "hutchd.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)


def sweep(home: Path) -> list[str]:
    """Kill whatever sandbox of ``home`` is still running (a failed test must not leak one)."""
    from hutch.providers.local import cgroups
    from hutch.providers.local.helpers import Helpers

    layout = cgroups.detect()
    for helper in Helpers(home, lambda: layout, lambda uid, procs: lambda: None).groups():  # copies in flight
        helper.kill_all()
        with contextlib.suppress(OSError):
            helper.remove()
    sandboxes = home / "sandboxes"
    ids = [p.name for p in sandboxes.iterdir()] if sandboxes.is_dir() else []
    if not ids:
        return []
    parents = [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]
    for sid in ids:
        group = cgroups.SandboxCgroup([p / sid for p in parents if (p / sid).exists()], v2=False)
        group.kill_all()
        with contextlib.suppress(OSError):
            group.remove()
    return ids


def destroy_all(home: Path) -> None:
    settings = Settings.load(home=home)
    if not socket_answers(settings.socket_path):
        return
    from hutch.errors import ApprovalRequiredError

    with Client(settings, autostart=False) as c:
        for rec in c.list():
            try:
                c.destroy(rec["id"])
            except ApprovalRequiredError as exc:  # a test's sandbox that requires approval to destroy
                c.decide(str(exc.approval_id), True, by="test cleanup")
                c.destroy(rec["id"], exc.approval_id)


@pytest.fixture
def hutch_home() -> Iterator[Path]:
    # Not under pytest's tmp_path: that is 0700 under root, and some tests hand the
    # directory to an unprivileged user.
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    yield home
    pid_file = home / "hutchd.pid"  # a daemon a test's CLI call started on demand
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
    sweep(home)
    subprocess.run(["rm", "-rf", str(home)], check=False)


@contextlib.contextmanager
def serving(home: Path, **env: str) -> Iterator[Daemon]:
    """A daemon of ``home`` (with ``env``) for the block; after it, its sandboxes destroyed,
    the daemon stopped and whatever it left killed."""
    d = Daemon(home, **env).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)


@pytest.fixture
def daemon(hutch_home: Path) -> Iterator[Daemon]:
    with serving(hutch_home) as d:
        yield d


# -- images: a tiny OCI layout and local registries (tests/imagekit.py), once per session ----------


@pytest.fixture(scope="session")
def image_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OCI layout with refs ``tiny`` (busybox + files), ``multi`` (amd64 + arm64) and ``arm`` (arm64)."""
    from tests.imagekit import tiny_layout

    layout = tmp_path_factory.mktemp("oci-layout")
    return tiny_layout(layout)


@pytest.fixture(scope="session")
def registry(image_layout: Path) -> Iterator[object]:
    """docker-registry on 127.0.0.1, anonymous, holding tiny:1, multi:1 (an index) and arm:1."""
    from tests.imagekit import Registry

    reg = Registry().start()
    try:
        reg.push(image_layout, "tiny", "tiny:1")
        reg.push(image_layout, "multi", "multi:1", all_platforms=True)
        reg.push(image_layout, "arm", "arm:1")
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def auth_registry(image_layout: Path) -> Iterator[object]:
    """docker-registry on 127.0.0.1 with htpasswd auth (user ``alice``), holding team/tiny:1."""
    from tests.imagekit import Registry

    reg = Registry(users={"alice": "s3cret-pass-42"}).start()
    try:
        reg.push(image_layout, "tiny", "team/tiny:1")
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A real 3-node Ray cluster (head + 2 workers), each node in a network namespace of its
    own (tests/raycluster.py), made once per session; torn down by PID and namespace."""
    from tests import raycluster

    root = Path(tempfile.mkdtemp(prefix="hr-", dir="/tmp"))  # short: unix socket paths live under it
    root.chmod(0o755)  # sandbox users pass through the nodes' homes
    # every node: a known memory size; the last one takes at most 4 sandboxes (placement tests)
    room = {"hutch_memory": float(8 << 30)}
    cluster = raycluster.start(root, resources=[room, room, room | {"hutch_sandboxes": 4.0}])
    try:
        yield cluster
    finally:
        cluster.teardown()
        for node in cluster.nodes:
            sweep(node.home)  # sandboxes the nodes' daemons left (they are in namespaces of their own)
        subprocess.run(["rm", "-rf", str(root)], check=False)
