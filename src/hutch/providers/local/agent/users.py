"""``exec --user``: who a run becomes, looked up inside the sandbox when the run starts.

The names come from the sandbox's own ``/etc/passwd`` and ``/etc/group`` as the run would see
them (a user the workload added with ``useradd`` is found; the host's files are never read).
Those files are the workload's to write, so they are read as hostile: a regular file only (a
FIFO there must not block the run), at most MAX_TABLE bytes, lines that do not parse skipped.
A user or group whose id the sandbox's user namespace does not map is refused by name, as is
one the agent, not being root, could not become.

The run then starts with that uid, gid and supplementary groups (real, effective and saved:
every capability goes, and it cannot switch back), no inheritable capabilities (cleared in the
supervisor before the run forks) and that user's HOME, USER and LOGNAME, unless the run set
them itself. bwrap has set no_new_privs for the whole sandbox: no setuid file or file capability
gives any of it back.
"""

from __future__ import annotations

import os
import stat

MAX_TABLE = 4 << 20
HINT = "give a uid (--user 1000 or 1000:1000), or a user the sandbox's /etc/passwd defines (useradd NAME as root inside)"


class UserError(Exception):
    """The run cannot become that user: why, for the run's error."""


def table(path: str) -> list[list[str]]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UserError(f"cannot read the sandbox's {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"the sandbox's {path} is not a regular file")
        data = os.read(fd, MAX_TABLE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TABLE:
        raise UserError(f"the sandbox's {path} is over {MAX_TABLE >> 20} MiB")
    text = data.decode("utf-8", "replace")
    return [line.split(":") for line in text.split("\n") if line and not line.startswith("#")]


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None


def _mapped(kind: str) -> int:
    """How many ids from 0 this user namespace maps (its map starts at 0 and is contiguous)."""
    total = 0
    try:
        with open(f"/proc/self/{kind}_map") as f:
            lines = sorted(tuple(int(x) for x in line.split()) for line in f if line.strip())
    except (OSError, ValueError):
        return 0
    for inside, _, count in lines:
        if inside != total:
            break
        total += count
    return total


def resolve(user: str) -> tuple[int, int, list[int], dict[str, str]]:
    """``user`` (NAME, UID, NAME:GROUP or UID:GID) as (uid, gid, supplementary groups, environment)."""
    if os.geteuid() != 0:
        raise UserError(f"this sandbox's agent runs as uid {os.geteuid()}, not root: its runs cannot become another user")
    name, _, group = user.partition(":")
    passwd = table("/etc/passwd")
    uid = _number(name)
    if uid is not None:
        entry = next((e for e in passwd if len(e) > 5 and e[2] == name), None)
    else:
        entry = next((e for e in passwd if len(e) > 5 and e[0] == name), None)
        if entry is None or _number(entry[2]) is None or _number(entry[3]) is None:
            raise UserError(f"no user {name!r} in the sandbox's /etc/passwd")
        uid = int(entry[2])
    gid = int(entry[3]) if entry is not None and _number(entry[3]) is not None else uid
    groups = table("/etc/group")
    if group:
        gid_asked = _number(group)
        if gid_asked is None:
            found = next((e for e in groups if len(e) > 2 and e[0] == group and _number(e[2]) is not None), None)
            if found is None:
                raise UserError(f"no group {group!r} in the sandbox's /etc/group")
            gid_asked = int(found[2])
        gid = gid_asked
    login = entry[0] if entry is not None else None
    for kind, value in (("uid", uid), ("gid", gid)):
        size = _mapped(kind)
        if not 0 <= value < size:
            span = f"0-{size - 1}" if size else "none"
            raise UserError(f"{kind} {value} of --user {user} is not mapped in this sandbox (mapped: {span})")
    extra = {gid}
    if login is not None and not group:  # the user's own groups (as login does; those the namespace maps)
        size = _mapped("gid")
        for e in groups:
            number = _number(e[2]) if len(e) > 3 else None
            if number is not None and number < size and login in e[3].split(","):
                extra.add(number)
    env = {"HOME": entry[5] if entry is not None and entry[5] else "/"}
    if login is not None:
        env |= {"USER": login, "LOGNAME": login}
    return uid, gid, sorted(extra), env


def clear_inheritable() -> None:
    """Empty this process's inheritable capabilities (capset(2)), so a run forked from it inherits none."""
    try:
        import ctypes  # here: only runs with --user pay its import
    except ImportError:
        raise UserError("cannot clear the run's inheritable capabilities: no ctypes in the agent's Python") from None
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.capget(header, data) != 0:
        raise UserError(f"cannot read the run's capabilities: {os.strerror(ctypes.get_errno())}")
    data[2] = data[5] = 0
    if libc.capset(header, data) != 0:
        raise UserError(f"cannot clear the run's inheritable capabilities: {os.strerror(ctypes.get_errno())}")
