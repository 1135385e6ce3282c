"""User namespaces with a range of uids, for sandboxes that run real users (root and the image's users).

A plain sandbox maps one uid (bwrap's own ``--unshare-user``). An image sandbox, or one
created with ``--user``, gets a user namespace made here with a RANGE of uids mapped
inside as ``0..size-1``, so packages can chown to their own users and ``useradd`` works:

- as root, the sandbox's range ``[base, base + 65536)`` from the machine-wide registry
  (:mod:`.uids`) is mapped to ``0..65535``; the namespace is created by the range's first
  uid, so it owns it and bwrap, started as that uid, joins it (``--userns FD``);
- as a normal user, ``newuidmap``/``newgidmap`` map ``0`` to the user and ``1..n`` to the
  user's subordinate range in ``/etc/subuid`` and ``/etc/subgid``; without one, only ``0``
  is mapped, to the user (root inside is the user, and no other user exists inside).

Nested user namespaces stay off: the namespace's own ``user.max_user_namespaces`` is set
to 0 before any sandbox process joins it (raising it needs CAP_SYS_RESOURCE in it, which
a sandbox never has), and bwrap checks it (``--assert-userns-disabled``); seccomp refuses
``unshare`` and ``setns`` besides. The fd returned by :func:`create` is also what an
idmapped mount of image layers takes (``mount_setattr`` with ``MOUNT_ATTR_IDMAP``): a file
owned by uid ``k`` on disk then shows as ``k`` inside.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hutch.errors import InvalidError, UnavailableError
from hutch.providers.local.host import readable

RANGE = 65536  # uids mapped inside an image sandbox as root: 0..65535, like a whole Linux system
TIMEOUT = 15.0
# What root inside may do to what its namespace owns (Docker's default set, less NET_RAW, MKNOD and
# AUDIT_WRITE, which a user namespace makes useless or only widens the kernel surface for). Never
# beyond the namespace: the host sees an unprivileged uid.
ROOT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_SETFCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
)
# Runs in the new namespace: says it is there, waits for its maps, then runs again (now root in it,
# with every capability of it) to turn nested user namespaces off.
SCRIPT = 'echo unshared; read go || exit 1; exec /bin/sh -c "echo 0 > /proc/sys/user/max_user_namespaces && echo done"'
NESTED = "echo unshared; read go || exit 1; echo done"
SUBID_HINT = "add a range for the user, e.g. usermod --add-subuids 100000-165535 --add-subgids 100000-165535 USER"


@dataclass(frozen=True)
class Mapping:
    """How uids inside map to the host: ``(inside, outside, count)`` lines, as in ``/proc/PID/uid_map``."""

    uids: tuple[tuple[int, int, int], ...]
    gids: tuple[tuple[int, int, int], ...]
    how: str  # range (root) | subuid (newuidmap) | single (one uid: root inside is the user)
    why: str = ""  # for "single": why there is no range

    @property
    def size(self) -> int:
        """Inside uids ``0..size-1`` are mapped (the ranges are contiguous from 0)."""
        return sum(n for _, _, n in self.uids)

    @property
    def gid_size(self) -> int:
        return sum(n for _, _, n in self.gids)

    def describe(self) -> str:
        if self.how == "range":
            start = self.uids[0][1]
            return f"uids 0-{self.size - 1} inside are host uids {start}-{start + self.size - 1}"
        if self.how == "subuid":
            return f"uid 0 inside is you, 1-{self.size - 1} your subordinate uids ({self.uids[1][1]}...)"
        return f"uid 0 inside is you, and no other uid is mapped ({self.why})"

    def check(self, uid: int, gid: int, what: str) -> None:
        """Refuse a user the namespace cannot map, saying why."""
        for value, size, kind in ((uid, self.size, "uid"), (gid, self.gid_size, "gid")):
            if 0 <= value < size:
                continue
            if self.how == "single":
                raise InvalidError(
                    f"--user {what}: {kind} {value} cannot be mapped in this sandbox: only root (0), which is you, is "
                    f"({self.why})",
                    hint=f"use --user root, or {SUBID_HINT} (newuidmap and newgidmap from the uidmap package)",
                )
            raise InvalidError(
                f"--user {what}: {kind} {value} is outside the {size} {kind}s mapped in the sandbox (0-{size - 1})",
                hint="use a user whose uid and gid are below 65536",
            )


def root_mapping(base: int, count: int = RANGE) -> Mapping:
    line = ((0, base, count),)
    return Mapping(line, line, "range")


def parse_subid(text: str, name: str, uid: int) -> list[tuple[int, int]]:
    """The ``(start, count)`` ranges of ``name`` (or its uid) in a subuid/subgid file."""
    out: list[tuple[int, int]] = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) != 3 or line.lstrip().startswith("#"):
            continue
        if parts[0] not in (name, str(uid)):
            continue
        with contextlib.suppress(ValueError):
            start, count = int(parts[1]), int(parts[2])
            if start > 0 and count > 0:
                out.append((start, count))
    return out


def user_mapping(uid: int | None = None, gid: int | None = None, etc: Path = Path("/etc")) -> Mapping:
    """A normal user's mapping: 0 -> the user, 1.. -> its first subordinate range (up to 65535 uids)."""
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    why = ""
    tools = [shutil.which(t, path="/usr/bin:/bin:/usr/sbin:/sbin") for t in ("newuidmap", "newgidmap")]
    ranges: list[list[tuple[int, int]]] = []
    for file in ("subuid", "subgid"):
        try:
            ranges.append(parse_subid((etc / file).read_text(), name, uid))
        except OSError:
            ranges.append([])
    if not all(tools):
        why = "newuidmap/newgidmap are not installed (Debian package uidmap)"
    elif not ranges[0] or not ranges[1]:
        missing = " and ".join(f"/etc/{f}" for f, r in zip(("subuid", "subgid"), ranges, strict=True) if not r)
        why = f"{name} has no range in {missing}"
    if why:
        return Mapping(((0, uid, 1),), ((0, gid, 1),), "single", why)
    (ustart, ucount), (gstart, gcount) = ranges[0][0], ranges[1][0]
    return Mapping(
        ((0, uid, 1), (1, ustart, min(ucount, RANGE - 1))),
        ((0, gid, 1), (1, gstart, min(gcount, RANGE - 1))),
        "subuid",
    )


def _read_line(fd: int, deadline: float) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not readable([fd], left):
            raise TimeoutError
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data


def _lines(lines: Sequence[tuple[int, int, int]]) -> str:
    return "".join(f"{a} {b} {c}\n" for a, b, c in lines)


def _write_maps(pid: int, mapping: Mapping) -> None:
    if mapping.how == "subuid":
        for tool, lines in (("newuidmap", mapping.uids), ("newgidmap", mapping.gids)):
            argv = [tool, str(pid), *(str(x) for line in lines for x in line)]
            done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=False)
            if done.returncode != 0:
                err = done.stderr.decode(errors="replace").strip()
                raise UnavailableError(
                    f"{tool} refused the sandbox's range: {err or done.returncode}",
                    hint=f"check /etc/sub{tool[3:6]} and that {tool} is setuid root (Debian package uidmap)",
                )
        return
    if mapping.how == "single":  # unprivileged: setgroups must be denied before a gid map is written
        Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/uid_map").write_text(_lines(mapping.uids))
    Path(f"/proc/{pid}/gid_map").write_text(_lines(mapping.gids))


def create(mapping: Mapping, owner: int | None, nested: bool = False) -> int:
    """A new user namespace with ``mapping`` and nested user namespaces off (``nested``: left on,
    for runsc, which makes its Sentry's and gofer's own); returns an fd of it.

    ``owner`` is the host uid that creates (and so owns) it: the uid bwrap then runs as (root
    only; None: this process's uid). The caller closes the fd once bwrap holds the namespace.
    """
    prefix: list[str] = []
    if owner is not None:
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if setpriv is None:
            raise UnavailableError("setpriv is missing", hint="install util-linux")
        prefix = [setpriv, f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "--"]
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if unshare is None:
        raise UnavailableError("unshare is missing", hint="install util-linux")
    proc = subprocess.Popen(
        [*prefix, unshare, "--user", "--", "/bin/sh", "-c", NESTED if nested else SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + TIMEOUT
    fd = -1
    try:
        if _read_line(proc.stdout.fileno(), deadline) != b"unshared\n":
            raise UnavailableError(
                f"cannot create a user namespace: {_err(proc)}",
                hint="enable unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 "
                "and user.max_user_namespaces > 0",
            )
        fd = os.open(f"/proc/{proc.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _write_maps(proc.pid, mapping)
        except OSError as exc:
            raise UnavailableError(f"cannot map the sandbox's uids ({mapping.describe()}): {exc}") from exc
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        if _read_line(proc.stdout.fileno(), deadline) != b"done\n" or proc.wait(timeout=TIMEOUT) != 0:
            raise UnavailableError(f"cannot turn nested user namespaces off in the sandbox: {_err(proc)}")
        return fd
    except TimeoutError:
        if fd >= 0:
            os.close(fd)
        raise UnavailableError("making the sandbox's user namespace took too long", hint="run hutch doctor") from None
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                f.close()


def _err(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        proc.kill()
    assert proc.stderr is not None
    try:
        _, err = proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        err = b""
    text = (err or b"").decode(errors="replace").strip()
    return text[-500:] or f"exit code {proc.returncode}"


def bwrap_args(fd: int, plan: Plan) -> list[str]:
    """bwrap's hardening for a sandbox in the namespace ``fd`` (instead of ``--unshare-all --unshare-user
    --disable-userns``): every other namespace new, nested user namespaces checked off. bwrap starts
    the agent as root inside; root keeps :data:`ROOT_CAPS` in its namespace, another user only what
    becoming itself takes (see :func:`agent_args`), and loses it in doing so."""
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--userns", str(fd), "--assert-userns-disabled", "--uid", "0", "--gid", "0", "--cap-drop", "ALL"]
    for cap in ROOT_CAPS if plan.uid == 0 else ("CAP_SETUID", "CAP_SETGID", "CAP_DAC_READ_SEARCH"):
        args += ["--cap-add", cap]
    return [*args, "--new-session", "--clearenv"]


def agent_args(plan: Plan) -> list[str]:
    """What the agent is told to become (nothing for root). bwrap 0.11 cannot itself switch to a uid and a
    gid of a joined namespace (it gives up root before it sets the gid)."""
    if plan.uid == 0 and plan.gid == 0:
        return []
    return ["--user=" + ":".join(str(x) for x in (plan.uid, plan.gid, *plan.groups))]


@dataclass(frozen=True)
class Plan:
    """The user a range sandbox runs as (its inside ids) and the namespace it runs in."""

    user: str  # as asked: root, NAME, UID, NAME:GROUP, UID:GID
    uid: int
    gid: int
    mapping: Mapping
    groups: tuple[int, ...] = ()  # supplementary: the groups of /etc/group that list the user


def _table(etc: Path | None, name: str) -> list[list[str]]:
    """The entries of ``etc/name`` (passwd, group), read without following a symlink out of an image."""
    if etc is None:
        return []
    try:
        dfd = os.open(etc, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return []
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        text = f.read(4 << 20).decode(errors="replace")
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def resolve(user: str, etc: Path | None) -> tuple[int, int]:
    """``user`` (NAME|UID[:GROUP|GID]) as inside ids; names from the sandbox's ``/etc`` (``etc``)."""
    name, _, group = user.partition(":")
    passwd = _table(etc, "passwd")
    if name.isdigit():
        uid = int(name)
        entry = next((e for e in passwd if len(e) > 3 and e[2] == name), None)
        gid = int(entry[3]) if entry and entry[3].isdigit() else uid
    elif name == "root":
        uid, gid = 0, 0
    else:
        entry = next((e for e in passwd if len(e) > 3 and e[0] == name), None)
        if entry is None or not entry[2].isdigit() or not entry[3].isdigit():
            raise InvalidError(
                f"--user {user}: no user {name!r} in the sandbox's /etc/passwd",
                hint="give a uid (--user 1000 or 1000:1000), or a user the image defines",
            )
        uid, gid = int(entry[2]), int(entry[3])
    if group.isdigit():
        gid = int(group)
    elif group:
        found = next((e for e in _table(etc, "group") if len(e) > 2 and e[0] == group and e[2].isdigit()), None)
        if found is None:
            raise InvalidError(f"--user {user}: no group {group!r} in the sandbox's /etc/group", hint="give a gid")
        gid = int(found[2])
    return uid, gid


def plan(user: str, root: bool, etc: Path | None, base: int | None = None) -> Plan:
    """Where ``user`` runs: its inside ids, checked against what can be mapped (root: the range from
    ``base``; a normal user: its subordinate ranges, else root alone)."""
    mapping = root_mapping(base if base is not None else 1) if root else user_mapping()
    uid, gid = resolve(user, etc)
    mapping.check(uid, gid, user)
    name = user.partition(":")[0]
    groups = sorted(
        {gid}
        | {
            int(e[2])
            for e in _table(etc, "group")
            if len(e) > 3 and e[2].isdigit() and name in e[3].split(",") and int(e[2]) < mapping.gid_size
        }
    )
    if not root and (uid, gid) != (0, 0):
        raise InvalidError(
            f"--user {user}: as a normal user, hutch runs a sandbox with its own users as root inside (you)",
            hint="use --user root and switch inside (runuser -u NAME -- CMD), or run hutch as root",
        )
    return Plan(user, uid, gid, mapping, tuple(groups))


def check_exec_user(sandbox_id: str, data: dict[str, object], user: str) -> None:
    """Refuse ``exec --user`` where the sandbox's runs cannot switch users, saying why: a sandbox of one
    mapped uid (no --user, no image), one whose agent gave up root at start (a non-root --user or image
    USER), one whose namespace maps only root (a normal user without subordinate ids), one made before."""
    own = data.get("user")
    if not isinstance(own, dict):
        raise InvalidError(
            f"sandbox {sandbox_id} maps one uid (its user, uid 1000): it has no other user to run as",
            hint="create the sandbox with users of its own (--user root, or an --image), then exec --user NAME",
        )
    if not own.get("switch"):
        raise InvalidError(
            f"sandbox {sandbox_id} was made by an earlier hutch whose agent cannot switch users",
            hint="recreate the sandbox, or switch inside the command (runuser -u NAME -- CMD)",
        )
    if (own.get("uid"), own.get("gid")) != (0, 0):
        raise InvalidError(
            f"sandbox {sandbox_id} runs as {own.get('name')} (uid {own.get('uid')}): its agent gave up root when the "
            "sandbox started, so its runs cannot become another user",
            hint=f"create it with --user root and give --user {own.get('name')} to the runs that need that user",
        )
    if own.get("map") == "single" and user not in ("root", "0", "0:0", "root:root", "root:0", "0:root"):
        raise InvalidError(
            f"--user {user}: only root (you) is mapped in sandbox {sandbox_id}: no other user exists there",
            hint=SUBID_HINT + " (newuidmap and newgidmap from the uidmap package), then recreate the sandbox",
        )
