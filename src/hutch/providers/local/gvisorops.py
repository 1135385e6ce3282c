"""Creating a gvisor sandbox (see :mod:`.gvisor`): its directories, user namespace, cgroups and
writable root as for bwrap, then an OCI bundle and ``runsc run`` in the sandbox's namespace.

Mixed into :class:`hutch.providers.local.LocalProvider`, whose ``create`` hands a spec with
``runtime: gvisor`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import HutchError, InvalidError, UnavailableError
from hutch.models import SandboxRecord
from hutch.provider import Capabilities
from hutch.providers.local import bwrap as bw
from hutch.providers.local import cgroups, changes, gvisor, hostca, hostpython, userns
from hutch.providers.local import mounts as mount_check
from hutch.providers.local.agent import wire
from hutch.providers.local.channel import Channel
from hutch.providers.local.egress import Egress
from hutch.providers.local.host import check_reachable, launcher, start_time
from hutch.providers.local.images import idmap, kept, rootfs
from hutch.providers.local.images import runtime as agent_runtime
from hutch.providers.local.images.rootfs import ImageRoot
from hutch.providers.local.images.types import ImageSource
from hutch.providers.local.sandboxdir import make_dirs, shared_workspace
from hutch.providers.local.uids import SandboxUids
from hutch.providers.local.workspace import tenant_dir

START_TIMEOUT = 60.0  # runsc starts in ~0.4 s; a loaded machine takes longer
PIDS_OVERHEAD = 512  # host tasks of an idle Sentry, its gofer and the platform's stubs: ~150 here
PIDS_FACTOR = 4  # host tasks per workload process, at most (ptrace: a stub per address space, tracer threads)
OOM = "the cgroup's OOM killer ends the whole sandbox (the Sentry holds all of its memory), not one run"
SECCOMP = "gVisor: the workload's system calls are served by the Sentry; runsc confines the Sentry with its own seccomp filter"

# What a gvisor sandbox can do: the local provider's, less exposing ports (a connection inside
# cannot be handed out of the Sentry), a disk cap, the warm pool (its members are bwrap's),
# placeholder secrets, and a per-process pids limit (the host sees the Sentry's tasks, not the
# workload's processes); an OOM kill takes the whole sandbox. Egress goes through the agent's relay.
CAPABILITIES = Capabilities(
    mounts=True,
    limits=frozenset({"memory", "cpus"}),
    oom_ends_sandbox=True,
    survives_daemon=True,
    secrets=True,
    shared_workspace=True,
    interactive=True,
    users=True,
    host_ca=True,
    network=True,
    workspace=True,
    pause=True,
    watch=True,
    events=True,
    ranged_reads=True,
    images=True,
    changes=True,
    image_store=True,
    usage=True,
    exec_users=True,
)


def _skeleton(top: Path, files: dict[str, bytes], points: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """The read-only root of a host-``/usr`` gvisor sandbox: mount points (``points``: the caller's
    mounts, absolute and checked, and whether each is a directory), the merged-usr links, generated
    identity files; returns the mounts that fill it (``/usr``, the allowed ``/etc``)."""
    top.mkdir()
    for d in ("usr", "etc", "proc", "dev", "sys", "tmp", "workspace", "root", "home/sandbox", ".hutch/agent"):
        (top / d).mkdir(mode=0o755, parents=True, exist_ok=True)
    for d in (".hutch/ctl", ".hutch/runs", ".hutch/rt", ".hutch/net"):
        (top / d).mkdir(mode=0o755, exist_ok=True)
    out = [gvisor.bind("/usr", "/usr", True)]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            (top / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (top / name).mkdir(mode=0o755)
            out.append(gvisor.bind(host, f"/{name}", True))
    for name in bw.ETC_ALLOW:
        host = Path("/etc") / name
        if not host.exists():
            continue
        if host.is_dir():
            (top / "etc" / name).mkdir(mode=0o755)
        else:
            (top / "etc" / name).touch(mode=0o644)
        out.append(gvisor.bind(host.resolve(), f"/etc/{name}", True))
    for path, content in files.items():
        (top / path.lstrip("/")).write_bytes(content)
        os.chmod(top / path.lstrip("/"), 0o644)
    for target, is_dir in points:
        point = top / target.lstrip("/")
        if not os.path.realpath(point).startswith(os.path.realpath(top) + "/"):  # through a merged-usr link
            raise InvalidError(f"cannot mount at {target!r} in a gvisor sandbox", hint="choose a path such as /data")
        if is_dir:
            point.mkdir(parents=True, exist_ok=True)
        elif not point.exists():
            point.parent.mkdir(parents=True, exist_ok=True)
            point.touch()
    for dirpath, dirnames, filenames in os.walk(top):  # explicit: the daemon's umask is 077
        for d in [dirpath, *(os.path.join(dirpath, d) for d in dirnames)]:
            if not os.path.islink(d):
                os.chmod(d, 0o755)
        for f in filenames:
            if not os.path.islink(os.path.join(dirpath, f)):
                os.chmod(os.path.join(dirpath, f), 0o644)
    return out


def _agent_dir(where: Path, files: dict[str, bytes]) -> Path:
    """The agent's package as files (bound read-only at /.hutch/agent)."""
    for d in (where, where / "__pycache__"):
        d.mkdir()
        os.chmod(d, 0o755)  # explicit: the daemon's umask is 077
    for name, content in files.items():
        (where / name).write_bytes(content)
        os.chmod(where / name, 0o444)
    return where


def _wait_ready(proc: subprocess.Popen[bytes], sock: str, sdir: Path) -> None:
    """Until runsc has started the sandbox and its agent answers on its socket."""
    import socket as socket_mod

    deadline = time.monotonic() + START_TIMEOUT
    started = False
    while time.monotonic() < deadline:
        if not started:
            code = proc.poll()
            if code is not None and code != 0:
                log = (sdir / "sandbox.log").read_text(errors="replace").strip()[-2000:]
                raise UnavailableError(f"runsc could not start the sandbox: {log or code}", hint="run hutch doctor")
            started = code == 0
        if started and os.path.exists(sock):
            with socket_mod.socket(socket_mod.AF_UNIX, socket_mod.SOCK_STREAM | socket_mod.SOCK_CLOEXEC) as s:
                s.settimeout(5.0)
                try:
                    s.connect(sock)
                    s.sendall(wire.message({"type": "ping"}))
                    if s.recv(1):
                        return
                except OSError:
                    pass
        time.sleep(0.02)
    raise UnavailableError("the gvisor sandbox did not start in time", hint=f"see {sdir / 'sandbox.log'}")


class GvisorMixin:
    settings: Settings
    root: bool
    uids: SandboxUids
    images: ImageSource
    egress: Egress
    layout: Any  # LocalProvider's property: the cgroup layout
    _teardown: Callable[[dict[str, Any], str], Any]
    _planned: Callable[[SandboxRecord], dict[str, Any]]
    _listen: Callable[[str, str, Any], Any]
    _configure: Callable[[dict[str, str], dict[str, str]], dict[str, Any]]

    def runsc(self) -> gvisor.Runsc:
        self.settings.home.mkdir(parents=True, exist_ok=True)
        return gvisor.find(self.settings.gvisor_platform, self.settings.home)

    def _gvisor_cgroups(self) -> None:
        """rlimits cannot bound a Go Sentry's memory: without cgroups (a user without delegation) gvisor is refused."""
        if self.layout.mode == "none":
            raise UnavailableError(
                f"the gvisor runtime needs cgroups for its limits ({self.layout.problem})",
                hint="run hutch as root, or in a delegated cgroup: systemd-run --user --scope -p Delegate=yes hutch serve",
            )

    def gvisor_check(self) -> tuple[bool, str, str | None]:
        """doctor's line: runsc and its platform; a failure fails doctor only where gvisor is the default runtime."""
        try:
            self._gvisor_cgroups()
            found = self.runsc()
        except HutchError as exc:
            needed = self.settings.runtime == "gvisor"
            return not needed, exc.message + ("" if needed else " (only --runtime gvisor needs it)"), exc.hint
        return True, f"{found.describe()}; network none, limits by cgroups; {OOM}", None

    async def _start_gvisor(self, rec: SandboxRecord, agent_files: dict[str, bytes]) -> tuple[dict[str, Any], dict[str, str]]:
        self._gvisor_cgroups()  # first: no runsc probe for a create that cannot be made
        found = await asyncio.to_thread(self.runsc)  # missing, too old or no platform: refused before anything is made
        image = await asyncio.to_thread(self.images.resolve, rec.spec.image, rec.owner) if rec.spec.image else None
        # its own users, a range as root: the image's (its USER, else root), else uid 1000 sandbox; as a user, root (you)
        want = rec.spec.user or (rootfs.user_of(image) if image is not None else str(bw.SANDBOX_UID) if self.root else "root")
        rec = await asyncio.to_thread(self.uids.allocate, rec, userns.RANGE if self.root else 1)
        parent = rec.data.get("parent_data")  # a sub-agent's range is its parent's: it shares its workspace
        uid = int(parent["uid"]) if parent else self.uids.of(rec)
        try:
            etc = image.rootfs / "etc" if image is not None else None
            plan = userns.plan(want, self.root, etc, uid)
            binds = mount_check.validate(rec.spec.mounts, self.settings.home)
            agent = await asyncio.to_thread(hostpython.prepare, agent_files, self.settings.home / "agent")
            where = self.settings.home / "runtime"
            runtime = await asyncio.to_thread(agent_runtime.prepare, agent.path, agent.version, where)
        except BaseException:
            await asyncio.to_thread(self.uids.release, rec.id)
            raise
        if self.root:
            for real, _, _ in binds:
                check_reachable(real, uid)
        sdir = self.settings.sandboxes_dir / rec.id
        data: dict[str, Any] = dict(rec.data) | {"dir": str(sdir), "uid": uid, "runtime": "gvisor"}
        data["user"] = {"name": plan.user, "uid": plan.uid, "gid": plan.gid, "map": plan.mapping.how, "switch": True}
        top = sdir if not rec.spec.tenant else tenant_dir(self.settings, rec.spec.tenant)
        root = ImageRoot(image, top / "root", runtime) if image is not None else None
        ns_fd: int | None = None
        stack = contextlib.ExitStack()
        try:
            own = (uid + plan.uid, uid + plan.gid) if self.root else (uid, uid)
            ws, ctl, rdir = await asyncio.to_thread(make_dirs, self.settings, self.root, sdir, own, rec.spec.tenant, None)
            ns_fd = await asyncio.to_thread(userns.create, plan.mapping, uid if self.root else None, True)
            gv = sdir / "gvisor"
            gv.mkdir()
            os.chmod(gv, 0o711)
            ca_fds: list[int] = []
            _, ca_env = hostca.bind(rec, self.settings, ca_fds)
            ca = os.pread(ca_fds[0], hostca.MAX_BYTES + 1, 0) if ca_fds else None
            for fd in ca_fds:
                os.close(fd)
            mounts: list[dict[str, Any]] = []
            if root is None:
                files = dict(bw.identity_files()) | ({hostca.PATH: ca} if ca else {})
                points = [(target, real.is_dir()) for real, target, _ in binds]
                mounts += await asyncio.to_thread(_skeleton, gv / "root", files, points)
                mounts += [gvisor.tmpfs("/tmp", 256 << 20), gvisor.tmpfs(bw.SANDBOX_HOME, 64 << 20, "0777")]
                root_path, readonly = str(gv / "root"), True
                env = bw.base_env() | ca_env
            else:
                if rec.spec.tenant:
                    await asyncio.to_thread(kept.prepare, root.dir, rec.spec.tenant, root.image, uid if self.root else None)
                await asyncio.to_thread(rootfs.make_dirs, root, uid if self.root else None)
                img = root.image
                data["image"] = {"ref": img.ref, "id": img.id, "root": str(root.dir), "rootfs": str(img.rootfs)}
                data["image_id"] = img.id
                data["defaults"] = rootfs.defaults(img)
                if data.get("root_seed"):
                    await self.seed_root(rec.id, root.upper, uid, data.pop("root_seed"))  # type: ignore[attr-defined]
                if self.root:  # the daemon's overlay over the image shifted into the sandbox's namespace
                    stack.enter_context(idmap.sandbox_root(img.rootfs, root.upper, root.work, root.mnt, ns_fd))
                idf = gv / "etc"
                idf.mkdir()
                os.chmod(idf, 0o755)
                mounts.append(gvisor.tmpfs("/.hutch", 1 << 20, "0755"))
                for path, content in bw.identity_files().items():
                    if path in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
                        (idf / Path(path).name).write_bytes(content)
                        os.chmod(idf / Path(path).name, 0o644)
                        mounts.append(gvisor.bind(idf / Path(path).name, path, True))
                if ca:
                    (idf / "host-ca.crt").write_bytes(ca)
                    os.chmod(idf / "host-ca.crt", 0o644)
                    mounts.append(gvisor.bind(idf / "host-ca.crt", hostca.PATH, True))
                root_path, readonly = str(root.mnt), False
                env = rootfs.env(img, bw.base_env(), plan) | ca_env
            pkg = await asyncio.to_thread(_agent_dir, gv / "agent", agent_files | agent.compiled)
            mounts += [gvisor.bind(pkg, hostpython.SANDBOX_DIR, True), gvisor.bind(runtime.dir, agent_runtime.SANDBOX_RT, True)]
            mounts.append(gvisor.bind(runtime.stdlib, runtime.stdlib_target, True))
            shared = shared_workspace(rec)
            data["workspace_path"] = shared or str(ws)
            mounts.append(gvisor.bind(shared or ws, "/workspace", bool(shared and rec.data.get("workspace_readonly"))))
            # the egress proxy's unix socket, made by the daemon: the agent's user reaches it inside (the Sentry
            # checks), the gofer (the range's first uid, its group) on the host
            net = gv / "net"
            net.mkdir()
            os.chmod(net, 0o550)
            if self.root:
                os.chown(net, uid + plan.uid, uid)
            mounts += [gvisor.bind(ctl, "/.hutch/ctl", False), gvisor.bind(rdir, "/.hutch/runs", False)]
            mounts.append(gvisor.bind(net, "/.hutch/net", False))
            mounts += [gvisor.bind(real, target, ro) for real, target, ro in binds]
            argv = [*runtime.argv(), "-I", "-S", "-B", hostpython.SANDBOX_DIR, "/.hutch/ctl/agent.sock", "-1"]
            argv += userns.agent_args(plan)
            caps = userns.ROOT_CAPS if plan.uid == 0 else ("CAP_SETUID", "CAP_SETGID", "CAP_DAC_READ_SEARCH")
            config = gvisor.bundle(root_path, readonly, argv, env, mounts, caps)
            (gv / "config.json").write_text(json.dumps(config))
            os.chmod(gv / "config.json", 0o644)
            state, logs = gv / "state", gv / "log"
            state.mkdir(mode=0o700)
            logs.mkdir(mode=0o700)
            if self.root:
                for d in (gv, state, logs):
                    os.chown(d, uid, uid)
            limits = rec.spec.limits
            host_tasks = limits.pids * PIDS_FACTOR + PIDS_OVERHEAD
            made, enforcement = await asyncio.to_thread(
                cgroups.create, self.layout, rec.id, limits.memory, host_tasks, limits.cpus, False
            )
            data["cgroups"] = [str(d) for d in made.dirs]
            if "pids" in enforcement:
                enforcement["pids"] = (
                    f"not per process under gVisor: the Sentry's host tasks are capped at {host_tasks} "
                    f"({enforcement['pids']}); reaching it ends the sandbox"
                )
            enforcement |= {"seccomp": SECCOMP, "oom": OOM, "runtime": f"gvisor: {found.describe()}"}
            container = rec.id.replace("_", "-")
            run = gvisor.run_argv(found, state, gv, gv / "pid", container, logs)
            tools = {t: shutil.which(t, path="/usr/bin:/bin:/usr/sbin:/sbin") for t in ("nsenter", "unshare")}
            if not all(tools.values()):
                raise UnavailableError("nsenter and unshare are needed for the gvisor runtime", hint="install util-linux")
            inner = [str(tools["unshare"]), "--mount", "--propagation", "private", "--"]
            if root is not None and not self.root:  # as a user: the overlay is mounted in the sandbox's namespace
                opts = ",".join(
                    f"{k}={str(v).replace(',', chr(92) + ',')}"
                    for k, v in (("lowerdir", root.image.rootfs), ("upperdir", root.upper), ("workdir", root.work))
                )
                script = 'mount -t overlay overlay -o "$1,userxattr" "$2" && shift 2 && exec "$@"'
                inner += ["/bin/sh", "-c", script, "hutch-overlay", opts, str(root.mnt)]
            argv_all = [str(tools["nsenter"]), f"--user=/proc/self/fd/{ns_fd}", "--", *inner, *run]
            prefix = launcher(uid if self.root else None, made.join_files(), {}) or []
            with open(sdir / "sandbox.log", "ab") as log:
                proc = subprocess.Popen(
                    prefix + argv_all, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=[ns_fd],
                    start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
                )  # fmt: skip
            try:
                await asyncio.to_thread(_wait_ready, proc, str(ctl / "agent.sock"), sdir)
            finally:
                if proc.poll() is None and not (gv / "pid").exists():
                    proc.kill()
                await asyncio.to_thread(proc.wait)
            stack.close()  # the gofer holds the root: detached from the host
            os.close(ns_fd)
            ns_fd = None
            pid = int((gv / "pid").read_text().strip())
            if self.root:  # the agent listens: the workload may no longer replace its socket
                os.chown(ctl, 0, 0)
                os.chmod(ctl, 0o755)
            async with Channel(str(ctl / "agent.sock")) as ch:
                configure = self._configure(env | rec.spec.env, rec.spec.secrets)
                await ch.request(configure, timeout=10.0)
            upper = root.upper if root is not None else None
            await asyncio.to_thread(changes.record_start, sdir, upper, Path(data["workspace_path"]))
            if rec.spec.network.mode != "none":
                await self._listen(rec.id, str(ctl / "agent.sock"), rec.spec.network)
            data |= {
                "init_pid": pid,
                "init_start": start_time(pid),
                "socket": str(ctl / "agent.sock"),
                "agent_protocol": wire.PROTOCOL,
            }
            return data, enforcement
        except BaseException:
            stack.close()
            if ns_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(ns_fd)
            await self._teardown(self._planned(rec.model_copy(update={"data": data})), rec.id)
            raise
