"""The local provider: real Linux isolation with bubblewrap, limits with cgroups.

Each sandbox is a long-lived bwrap sandbox whose PID 2 is the hutch agent
(:mod:`hutch.providers.local.agent`). The sandbox is started detached (new session, no
``--die-with-parent``) so that it outlives the daemon; the daemon re-adopts it by the
host pid of its init and that process's start time. When hutch runs as root, bwrap is
started as an unprivileged host uid of its own, allocated machine-wide (:mod:`.uids`);
otherwise as the user. Inside, the workload is uid 1000 ``sandbox``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import signal
import subprocess
from pathlib import Path
from typing import Any, cast

from hutch.config import Settings
from hutch.errors import CapacityError, ConflictError, HutchError, UnavailableError
from hutch.models import RawOutput, SandboxRecord, SandboxState
from hutch.provider import Capabilities, CheckResult, ExecSpec, OnGone, Usage, tenant_storage
from hutch.providers.local import bwrap as bw
from hutch.providers.local import cgroups, changes, disk, freeze, hostca, hostpython, mounts, placeholders, seccomp, userns, view
from hutch.providers.local.agent import wire
from hutch.providers.local.agentops import AgentOpsMixin
from hutch.providers.local.changeops import ChangesMixin
from hutch.providers.local.channel import agent_protocol, incompatible, run_exec
from hutch.providers.local.egress import Egress, OnEvent, proxy_env
from hutch.providers.local.gvisorops import CAPABILITIES as GVISOR
from hutch.providers.local.gvisorops import GvisorMixin
from hutch.providers.local.helpers import Helpers
from hutch.providers.local.hold import bind_args, idle_helper
from hutch.providers.local.hold import check as hold_check
from hutch.providers.local.host import check_reachable, drop, kill, launcher, reach_check, start_time, wait_start
from hutch.providers.local.images import carry, kept, rootfs
from hutch.providers.local.images import runtime as agent_runtime
from hutch.providers.local.images.rootfs import ImageRoot
from hutch.providers.local.images.source import default_images, resolve_image
from hutch.providers.local.images.types import ImageSource
from hutch.providers.local.pidwait import wait_exit
from hutch.providers.local.pooling import PoolMixin
from hutch.providers.local.runs import raw_output
from hutch.providers.local.sandboxdir import make_dirs, shared_workspace
from hutch.providers.local.trash import Trash
from hutch.providers.local.uids import SandboxUids
from hutch.providers.local.watch import STATUS_FILE, Watcher, cause, release
from hutch.providers.local.workspace import WorkspaceMixin, tenant_dir
from hutch.units import format_size

AGENT_DIR = hostpython.SANDBOX_DIR  # the agent's files inside the sandbox (a package: see agent/__init__.py)
AGENT_FILES = {p.name: p.read_bytes() for p in sorted((Path(__file__).parent / "agent").glob("*.py"))}
KILL_GRACE = 5.0


class LocalProvider(AgentOpsMixin, WorkspaceMixin, ChangesMixin, PoolMixin, GvisorMixin):
    name = "local"
    capabilities = Capabilities(
        mounts=True,
        limits=frozenset({"memory", "pids", "cpus", "disk"}),
        survives_daemon=True,
        secrets=True,
        placeholders=True,
        shared_workspace=True,
        interactive=True,
        users=True,
        host_ca=True,
        network=True,
        ports=True,
        workspace=True,
        pause=True,
        watch=True,
        events=True,
        ranged_reads=True,
        images=True,
        changes=True,
        image_store=True,
        usage=True,
        pool=True,
        exec_users=True,
        default_runtime="bwrap",
        runtimes=(("gvisor", GVISOR),),
    )

    def __init__(self, settings: Settings, images: ImageSource | None = None) -> None:
        self.settings = settings
        self.images: ImageSource = images or default_images(settings)
        self.root = os.geteuid() == 0
        self._bwrap: bw.Bwrap | None = None
        self._layout: cgroups.Layout | None = None
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self.egress = Egress(settings.egress_hosts, upstream_ca=settings.egress_ca)
        self.helpers = Helpers(settings.home, lambda: self.layout, self._drop)
        self.uids = SandboxUids(settings, self.root)
        self.watcher = Watcher()
        self.trash = Trash(settings.home / "trash")  # a destroyed sandbox's directory, deleted behind the destroy
        self.trash.sweep()  # what a previous daemon left there

    def bind_events(self, on_event: OnEvent) -> None:
        """Where egress decisions go (the Service records them as events): EventSource."""
        self.egress.on_event = on_event

    # -- probing ---------------------------------------------------------------------

    @property
    def layout(self) -> cgroups.Layout:
        if self._layout is None:
            self._layout = cgroups.detect()
        return self._layout

    def bwrap(self) -> bw.Bwrap:
        if self._bwrap is None:
            self.settings.home.mkdir(parents=True, exist_ok=True)
            found = bw.find_bwrap(self.settings.home)
            self._probe(found)
            self._bwrap = found
        return self._bwrap

    def _probe(self, found: bw.Bwrap) -> None:
        """Run ``true`` with the exact hardening flags; fail closed with the reason."""
        args = [found.path, *bw.HARDENING, "--ro-bind", "/usr", "/usr", *bw.root_links(), "--proc", "/proc"]
        uid = self.settings.uid_base if self.root else None
        with seccomp.fds() as fds:  # the same filter as a sandbox: a kernel without seccomp fails here
            args += ["--dev", "/dev", *seccomp.bwrap_args(fds)[0], "--", "/usr/bin/true"]
            drop = self._drop(uid, [])
            proc = subprocess.run(args, capture_output=True, timeout=30, check=False, preexec_fn=drop, pass_fds=fds)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            hint = "enable unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1"
            if "seccomp" in err.lower():
                hint = seccomp.KERNEL_HINT
            elif "max_user_namespaces" in err or "No space left" in err:
                hint = "raise the user namespace limit: sysctl -w user.max_user_namespaces=15000"
            elif "apparmor" in err.lower() or "Permission denied" in err:
                hint = (
                    "user namespaces are restricted (AppArmor?): "
                    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or install an AppArmor profile for bwrap"
                )
            raise UnavailableError(f"bubblewrap cannot create a sandbox here: {err or proc.returncode}", hint=hint)

    _drop = staticmethod(drop)  # preexec: join the sandbox cgroups (as root), then become the sandbox uid

    async def check(self) -> list[CheckResult]:
        out: list[CheckResult] = []
        try:
            found = await asyncio.to_thread(self.bwrap)
            out.append(CheckResult("bwrap", True, f"{found.path} {'.'.join(map(str, found.version))} ({found.source})"))
            out.append(CheckResult("user namespaces", True, "a hardened probe sandbox started"))
            out.append(seccomp.check())
        except HutchError as exc:
            out.append(CheckResult("bwrap", False, exc.message, exc.hint))
        out.append(cgroups.check(self.layout))
        out.append(await asyncio.to_thread(self.uids.check))
        out.append(await asyncio.to_thread(reach_check, self.settings.home))
        out.append(await asyncio.to_thread(hostpython.check))
        out.append(await asyncio.to_thread(hold_check, self.settings.home, self.settings.idle_agent))
        out.append(CheckResult("gvisor", *await asyncio.to_thread(self.gvisor_check)))
        return out

    # -- lifecycle -------------------------------------------------------------------

    def _slot_uid(self, rec: SandboxRecord) -> int:
        return self.uids.of(rec)

    def _validate_mounts(self, rec: SandboxRecord) -> list[tuple[int, str, bool]]:
        checked = mounts.validate(rec.spec.mounts, self.settings.home)
        if self.root:
            for real, _, _ in checked:
                check_reachable(real, self._slot_uid(rec))
        opened: list[tuple[int, str, bool]] = []
        try:
            for real, target, readonly in checked:
                opened.append((os.open(real, os.O_PATH | os.O_CLOEXEC), target, readonly))
        except BaseException:
            for fd, _, _ in opened:
                os.close(fd)
            raise
        return opened

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        try:
            if rec.spec.runtime == "gvisor":
                return await self._start_gvisor(rec, AGENT_FILES)
            return await self._start(rec)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CapacityError(
                    f"no space left to create the sandbox: {exc}", hint="free disk space under HUTCH_HOME"
                ) from exc
            raise UnavailableError(f"cannot create the sandbox: {exc}", hint="run hutch doctor") from exc

    async def _start(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        if rec.spec.limits.disk is not None:
            disk.check(self.root, rec.spec.tenant)
        image = await asyncio.to_thread(resolve_image, self.images, rec) if rec.spec.image else None
        # its own users (a range of uids): asked for, or an image's (its USER, else root); else uid 1000 sandbox
        want = rec.spec.user or (rootfs.user_of(image) if image is not None else None)
        rec = await asyncio.to_thread(self.uids.allocate, rec, userns.RANGE if want and self.root else 1)
        try:  # bad input first, before any probing
            etc = image.rootfs / "etc" if image is not None else None
            plan = userns.plan(want, self.root, etc, rec.data.get("uid")) if want else None
            mounts = self._validate_mounts(rec)
        except BaseException:
            await asyncio.to_thread(self.uids.release, rec.id)
            raise
        try:
            found = self.bwrap()
            agent = await asyncio.to_thread(hostpython.prepare, AGENT_FILES, self.settings.home / "agent")
            held_by = await asyncio.to_thread(idle_helper, self.settings)
            runtime = None
            if image is not None:
                where = self.settings.home / "runtime"
                runtime = await asyncio.to_thread(agent_runtime.prepare, agent.path, agent.version, where)
        except BaseException:
            for fd, _, _ in mounts:
                os.close(fd)
            await asyncio.to_thread(self.uids.release, rec.id)
            raise
        uid = self._slot_uid(rec)
        sdir = self.settings.sandboxes_dir / rec.id
        data: dict[str, Any] = dict(rec.data) | {"dir": str(sdir), "uid": uid}
        fds: list[int] = [fd for fd, _, _ in mounts]
        identity = [*bw.HARDENING, "--uid", str(bw.SANDBOX_UID), "--gid", str(bw.SANDBOX_UID)]
        if plan is not None:
            data["user"] = {"name": plan.user, "uid": plan.uid, "gid": plan.gid, "map": plan.mapping.how, "switch": True}
        cg: cgroups.SandboxCgroup | None = None
        proc: subprocess.Popen[bytes] | None = None
        top = sdir / "disk" if rec.spec.limits.disk is not None else sdir  # the capped filesystem holds what it writes
        if storage := tenant_storage(rec):  # kept with the tenant's workspace (images/kept.py)
            top = tenant_dir(self.settings, storage)
        root = ImageRoot(image, top / "root", runtime) if image is not None and runtime is not None else None
        ns_fd: int | None = None
        stack = contextlib.ExitStack()
        try:
            own = (uid + plan.uid, uid + plan.gid) if plan and self.root else (uid, uid)  # the user's, seen from here
            cap = (rec.spec.limits.disk, uid) if rec.spec.limits.disk is not None else None
            ws, ctl, rdir = await asyncio.to_thread(make_dirs, self.settings, self.root, sdir, own, tenant_storage(rec), cap)
            if plan is not None:  # its own user namespace, a range of uids mapped: made before bwrap joins it
                ns_fd = await asyncio.to_thread(userns.create, plan.mapping, uid if self.root else None)
                fds.append(ns_fd)
                identity = userns.bwrap_args(ns_fd, plan)
            if root is not None and rec.spec.tenant:
                await asyncio.to_thread(kept.prepare, root.dir, rec.spec.tenant, root.image, uid if self.root else None)
            if root is not None:  # its writable root: the sandbox's root's (its first uid's, as root)
                await asyncio.to_thread(rootfs.make_dirs, root, uid if self.root else None)
                img = root.image
                data["image"] = {"ref": img.ref, "id": img.id, "root": str(root.dir), "rootfs": str(img.rootfs)}
                data["image_id"] = img.id  # what hutch image rm and prune see as in use
                data["defaults"] = rootfs.defaults(root.image)
                if data.get("root_seed"):  # a fork's or a restored snapshot's writable root, before it is mounted
                    await self.seed_root(rec.id, root.upper, uid, data.pop("root_seed"))
            enforcement: dict[str, str] = {"runtime": "bwrap: namespaces and seccomp on the host's kernel"}
            rlimits: dict[int, int] = {}
            limits = rec.spec.limits
            if self.layout.mode != "none":
                made, enforcement = await asyncio.to_thread(  # a pool member starts at the lowest cpu priority
                    cgroups.create,
                    self.layout,
                    rec.id,
                    limits.memory,
                    limits.pids,
                    limits.cpus,
                    bool(rec.data.get("pool_member")),
                )
                cg = made
                data["cgroups"] = [str(d) for d in made.dirs]
            for key in ("memory", "pids", "cpus"):
                if key in enforcement:
                    continue
                if key == "memory":
                    rlimits[resource.RLIMIT_AS] = limits.memory
                    enforcement[key] = "rlimit (address space)"
                elif key == "pids":
                    rlimits[resource.RLIMIT_NPROC] = limits.pids
                    enforcement[key] = "rlimit (per user)"
                elif limits.cpus is not None:
                    enforcement[key] = "not enforced (no cgroup cpu controller)"
            if limits.disk is not None:
                enforcement["disk"] = f"ext4 of {format_size(limits.disk)} on a loop device (writable root and /workspace)"
            shared = shared_workspace(rec)
            data["workspace_path"] = shared or str(ws)  # a sub-agent's is its parent's
            ws_fd = os.open(shared or ws, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            ctl_fd = os.open(ctl, os.O_PATH | os.O_CLOEXEC)
            runs_fd = os.open(rdir, os.O_PATH | os.O_CLOEXEC)
            fds += [ws_fd, ctl_fd, runs_fd]
            args = [found.path, *identity, "--hostname", "sandbox"]
            ca_args, ca_env = hostca.bind(rec, self.settings, fds)
            armed = placeholders.prepare(rec.spec, rec.id, sdir, self.settings, image.rootfs if image else None, fds)
            ca_args, ca_env, data["placeholders"] = ca_args + armed.args, ca_env | armed.env, armed.placeholders
            ca_args += bind_args(held_by, fds)
            binds = view.Binds(ws_fd, bool(shared and rec.data.get("workspace_readonly")), ctl_fd, runs_fd, mounts, ca_args)
            if root is None:
                fs_args, enforcement["seccomp"] = view.host_view(agent, AGENT_FILES, binds, fds)
            else:  # as root the overlay over the image shifted by the sandbox's namespace: attached until bwrap runs
                placed = stack.enter_context(rootfs.mounted(root, ns_fd if self.root else None))
                fs_args, enforcement["seccomp"] = view.image_view(root, placed, agent, AGENT_FILES, binds, fds)
            args += fs_args
            info_r, info_w = os.pipe()
            ready_r, ready_w = os.pipe()
            status_fd = os.open(sdir / STATUS_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            fds += [info_w, ready_w, status_fd]
            args += ["--info-fd", str(info_w), "--chdir", "/workspace"]
            args += ["--json-status-fd", str(status_fd)]  # its init's exit code, for a death report
            env = (bw.base_env() if root is None else rootfs.env(root.image, bw.base_env(), plan)) | ca_env
            data |= {"base_env": env} if rec.data.get("pool_member") else {}  # what adopt_member configures on
            for k, v in env.items():
                args += ["--setenv", k, v]
            args += ["--", *view.agent_command(agent, root, ready_w, userns.agent_args(plan) if plan else [], held_by)]
            log = open(sdir / "sandbox.log", "ab")  # noqa: SIM115 - handed to the child
            try:
                procs = cg.join_files() if cg else []
                prefix = launcher(uid if self.root else None, procs, rlimits, held_by)
                proc = subprocess.Popen(
                    prefix + args if prefix is not None else args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=fds,
                    start_new_session=True,
                    preexec_fn=None if prefix is not None else self._drop(uid if self.root else None, procs, rlimits),
                )
            finally:
                log.close()
                for fd in fds:
                    os.close(fd)
                fds = []
            self._children[rec.id] = proc
            info = await asyncio.to_thread(wait_start, proc, info_r, ready_r, sdir)
            stack.close()  # bwrap has bound the root: it is detached from the host
            if self.root:  # the agent listens: the workload may no longer replace its socket
                os.chown(ctl, 0, 0)
                os.chmod(ctl, 0o755)
            await self._configure_new(str(ctl / "agent.sock"), rec, env, armed.placeholders)
            upper = root.upper if root is not None else None  # what it has at start: what hutch diff compares with
            await asyncio.to_thread(changes.record_start, sdir, upper, Path(data["workspace_path"]))
            if rec.spec.network.mode != "none":
                self.egress.arm(rec.id, armed.vault)
                await self._listen(rec.id, str(ctl / "agent.sock"), rec.spec.network)
            data |= {
                "init_pid": info["child-pid"],
                "init_start": start_time(info["child-pid"]),
                "bwrap_pid": proc.pid,
                "bwrap_start": start_time(proc.pid),
                "socket": str(ctl / "agent.sock"),
                "agent_protocol": wire.PROTOCOL,
            }
            return data, enforcement
        except BaseException:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            stack.close()
            # whatever got made, found by the sandbox's id (a cgroup half-created included)
            await self._teardown(self._planned(rec.model_copy(update={"data": data})), rec.id)
            raise

    async def alive(self, rec: SandboxRecord) -> bool:
        pid, start = rec.data.get("init_pid"), rec.data.get("init_start")
        if not pid or start_time(int(pid)) != start:
            return False
        await asyncio.to_thread(self.uids.adopt, rec)
        if rec.state == SandboxState.paused:  # frozen: its agent cannot answer; its init is still ours
            theirs = rec.data.get("agent_protocol", wire.PROTOCOL)  # as recorded at create
        else:
            try:
                theirs = await agent_protocol(rec.data["socket"])
            except (HutchError, OSError):
                return False
        if theirs != wire.PROTOCOL:  # made by another hutch (an upgrade): listed, never used
            files = rec.data.get("workspace_path") or str(Path(rec.data["dir"]) / "workspace")
            raise incompatible(rec.name or rec.id, theirs, files)
        return True

    def _planned(self, rec: SandboxRecord) -> dict[str, Any]:
        """What a sandbox owns, derived from its id: also right for a create cut short by a crash."""
        data = dict(rec.data)
        data.setdefault("dir", str(self.settings.sandboxes_dir / rec.id))
        if not data.get("cgroups"):
            parents = [*self.layout.v1.values(), *([self.layout.v2 / cgroups.GROUP] if self.layout.v2 else [])]
            data["cgroups"] = [str(p / rec.id) for p in parents if (p / rec.id).exists()]
        return data

    def watch(self, rec: SandboxRecord, on_gone: OnGone) -> bool:
        """Follow the sandbox's init; when it ends on its own, say how, free its cgroups."""
        data = dict(rec.data)
        if not data.get("init_pid"):
            return False
        ooms = self._cgroup(rec).oom_kills()

        async def ended() -> None:
            death = await asyncio.to_thread(cause, data, ooms, self._children.pop(rec.id, None))
            await self.egress.close(rec.id)
            self.egress.arm(rec.id, None)
            await asyncio.to_thread(release, data)
            await on_gone(rec.id, death)

        self.watcher.follow(rec.id, int(data["init_pid"]), data.get("init_start"), ended)
        return True

    async def destroy(self, rec: SandboxRecord) -> bool:
        data = self._planned(rec)
        existed = Path(data["dir"]).exists() or bool(data["cgroups"])
        # a copy from or into this sandbox stops first (killed and reaped), then its workspace goes
        await self.helpers.stop(ConflictError(f"sandbox {rec.id} is being destroyed"), rec.id)
        await self.egress.close(rec.id)
        await self._teardown(data, rec.id)
        return existed

    async def _teardown(self, data: dict[str, Any], sandbox_id: str) -> None:
        self.watcher.forget(sandbox_id)  # ended on purpose: not a death to report
        self.egress.arm(sandbox_id, None)

        def work() -> None:
            pid, start = data.get("init_pid"), data.get("init_start")
            ended = pid is not None and start_time(int(pid)) == start and kill(int(pid))
            cg = cgroups.SandboxCgroup([Path(d) for d in data.get("cgroups", [])], v2=False)
            cg.kill_all(freeze=not ended)  # a killed init ended its pid namespace at once
            child = self._children.pop(sandbox_id, None)
            if child is not None and wait_exit([child.pid], KILL_GRACE):
                child.wait()  # ended: reaped at once
            if pid:
                wait_exit([int(pid)], KILL_GRACE, same=lambda p: start_time(p) == start)
            cg.remove()
            if data.get("dir"):
                rootfs.teardown(Path(data["dir"]))  # nothing of a create cut short stays mounted in it
                disk.remove(Path(data["dir"]))
                if not self.root and (data.get("user") or {}).get("map") == "subuid":  # files of its subordinate uids
                    carry.purge(self.bwrap().path, Path(data["dir"]))
                self.trash.discard(Path(data["dir"]))  # deleted behind the destroy
            self.uids.release(sandbox_id)

        await asyncio.to_thread(work)

    async def close(self) -> None:
        await self.watcher.close()
        await self.helpers.close(UnavailableError("the daemon is stopping", hint="retry once it runs again"))
        await self.egress.close_all()
        self._children.clear()

    async def pause(self, rec: SandboxRecord) -> str:
        return await asyncio.to_thread(freeze.pause, rec.data)

    async def resume(self, rec: SandboxRecord) -> None:
        await asyncio.to_thread(freeze.resume, rec.data, rec.data.get("paused_by"))

    # -- exec ------------------------------------------------------------------------

    def _cgroup(self, rec: SandboxRecord) -> cgroups.SandboxCgroup:
        return cgroups.of(tuple(rec.data.get("cgroups", [])))

    def usage(self, rec: SandboxRecord) -> Usage:
        """From the sandbox's cgroup: memory in use, CPU time, processes."""
        cg = self._cgroup(rec)
        if not cg.dirs:
            return {}
        found = {"memory": cg.memory_current(), "cpu_seconds": cg.cpu_seconds(), "pids": cg.pids_current()}
        return cast(Usage, {k: v for k, v in found.items() if v is not None})

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        cg = self._cgroup(rec)
        ooms: list[int] = []  # the cgroup's out-of-memory kills before the run: read while the sandbox starts it
        env = proxy_env(spec.run_id) | spec.env if rec.spec.network.mode != "none" else spec.env
        header = {
            "type": "exec",
            "run_id": spec.run_id,
            "argv": spec.argv,
            "env": env,
            "redact": spec.redact,  # None: no redaction for this run
            "cwd": spec.cwd,
            "timeout": spec.timeout,
            "idle_timeout": spec.idle_timeout,
            "stream": spec.stream,
            "disk_cap": self.settings.disk_cap,
            "live_limit": None if spec.on_output is not None else spec.max_output,  # nobody watches live: send what is kept
            **({"user": spec.user} if spec.user is not None else {}),  # looked up and switched to inside
        }
        inbox = None
        if (interactive := spec.interactive) is not None:
            header |= {"interactive": True, "tty": interactive.tty, "rows": interactive.rows, "cols": interactive.cols}
            inbox = interactive.inbox
        socket_path = os.path.join(os.path.dirname(rec.data["socket"]), wire.EXEC_SOCKET)
        reply, out = await run_exec(
            socket_path,
            header,
            spec.stdin,
            spec.max_output,
            spec.on_output,
            inbox,
            spec.on_start,
            lambda: ooms.append(cg.oom_kills()),
        )
        # only a SIGKILL nobody asked for may be the kernel's out-of-memory killer: read the counter again only then
        oom = reply.get("signal") == signal.SIGKILL and reply.get("reason") is None and bool(ooms) and cg.oom_kills() > ooms[0]
        return self._raw(reply, bytes(out.data["stdout"]), bytes(out.data["stderr"]), oom)

    _raw = staticmethod(raw_output)
