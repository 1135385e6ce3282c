"""Checks of input from outside, shared by the models and the service.

Names, env variables, command lines, paths and file modes, and the bounds of every number
and count a caller can send (DESIGN: bounded everything). Every check raises
:class:`InvalidError` with a message naming the bad value and a hint, so bad input is
refused at the edge instead of failing later inside a sandbox.

Patterns are matched with ``fullmatch``: ``$`` also matches before a trailing newline,
which let ``"name\\n"`` pass as a name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sized

from hutch.errors import InvalidError

MAX_INT64 = (1 << 63) - 1  # offsets, sequence numbers (SQLite's INTEGER)
# Memory: measured on these machines, a sandbox starts and runs from 11 MiB with cgroups and
# from 20 MiB with the rlimit (address space) fallback; the minimum leaves a margin.
MIN_MEMORY = 32 << 20
MAX_MEMORY = 1 << 40
# Processes: bwrap, the sandbox's init, the agent and its spare supervisor need 6 for one
# `sh -c` run; the minimum leaves room for a small pipeline.
MIN_PIDS = 16
MAX_PIDS = 1 << 22  # the kernel's PID_MAX_LIMIT
MAX_OUTPUT = 1 << 30  # bytes of one stream an exec result may buffer
MAX_LABELS = 64
MAX_ITEMS = 1024  # hosts, ports, address ranges, approval actions ... in one request
MAX_MOUNTS = 64
MAX_ENV = 4096  # variables in one env
MAX_ENV_NAME = 256
MAX_ARG = (128 << 10) - 1  # the kernel's MAX_ARG_STRLEN, less the NUL
MAX_ARGS_TOTAL = 1 << 20  # argv + env, well under ARG_MAX (a quarter of the 8 MiB stack)
MAX_PATH = 4095  # PATH_MAX, less the NUL
MAX_FILE_MODE = 0o777  # no setuid, setgid or sticky bit on a written file

NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
LABEL_KEY_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_./-]{0,62}")
SECRET_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# An env variable's name: anything execve can carry (npm's "npm_config_//host/:_authToken"
# included) but '=', control characters (NUL, newline ...) and an empty name.
ENV_NAME_RE = re.compile(rf"[^=\x00-\x1f\x7f]{{1,{MAX_ENV_NAME}}}")
NAME_HINT = "names are 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
# --user: a name or a uid, then optionally a group name or a gid (at most 9 digits: below 2^31, never
# negative; no '/', no newline: the agent looks names up in the sandbox's /etc/passwd and /etc/group)
_ID = r"(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,9})"
USER_RE = re.compile(rf"{_ID}(?::{_ID})?")


def is_name(text: str | None) -> bool:
    """A sandbox, tenant, snapshot or fork name: the whole text matches (no trailing newline)."""
    return isinstance(text, str) and NAME_RE.fullmatch(text) is not None


def check_name(name: str | None, what: str) -> str:
    if not is_name(name):
        raise InvalidError(f"invalid {what} name {name!r}", hint=NAME_HINT)
    assert name is not None
    return name


def check_count(items: Sized, limit: int, what: str) -> None:
    if len(items) > limit:
        raise InvalidError(f"too many {what}: {len(items)}; the limit is {limit}", hint=f"give at most {limit}")


def check_text(value: str, what: str, limit: int = MAX_ARG) -> str:
    """A string that becomes a C string (argv, env, a path): no NUL, at most ``limit`` bytes."""
    if "\x00" in value:
        raise InvalidError(f"{what} contains a NUL byte: {value[:80]!r}", hint="NUL cannot be passed to a program; remove it")
    if len(value) > limit or len(value.encode(errors="surrogateescape")) > limit:
        raise InvalidError(f"{what} is longer than {limit} bytes", hint="pass long data in a file or on stdin")
    return value


def check_env(env: dict[str, str], what: str = "env") -> dict[str, str]:
    """Env variables: names without '=' or control characters, values without NUL, bounded."""
    check_count(env, MAX_ENV, f"{what} variables")
    for name, value in env.items():
        if ENV_NAME_RE.fullmatch(name) is None:
            raise InvalidError(
                f"invalid {what} name {name!r}",
                hint=f"a variable's name is 1-{MAX_ENV_NAME} characters without '=' or control characters, e.g. API_URL",
            )
        check_text(value, f"the value of {what} variable {name}")
    check_total(env_strings(env), f"the {what}")
    return env


def env_strings(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def check_total(strings: Iterable[str], what: str) -> None:
    total = sum(len(s.encode(errors="surrogateescape")) + 1 for s in strings)
    if total > MAX_ARGS_TOTAL:
        raise InvalidError(
            f"{what} is {total} bytes; a program's arguments and environment may take at most {MAX_ARGS_TOTAL}",
            hint="pass long data in a file or on stdin",
        )


def check_command(command: list[str] | str) -> list[str] | str:
    """A command: argv elements or one shell command line, none with a NUL."""
    if isinstance(command, str):
        check_text(command, "the shell command")
        check_total([command], "the shell command")
        return command
    for i, arg in enumerate(command):
        check_text(arg, f"argument {i} of the command")
    check_total(command, "the command line")
    return command


APPROVAL_ACTIONS = ("destroy", "network.change", "push.delete")  # and exec:PATTERN


def check_action(action: str) -> None:
    """An action that can require approval: one of APPROVAL_ACTIONS, or ``exec:PATTERN``."""
    if action in APPROVAL_ACTIONS or (action.startswith("exec:") and len(action) > len("exec:")):
        return
    raise InvalidError(
        f"unknown action {action!r}",
        hint=f"use {', '.join(APPROVAL_ACTIONS)} or exec:PATTERN (a shell glob over the command, e.g. 'exec:git push*')",
    )


def check_user(user: str | None, flag: str = "--user") -> str | None:
    """A user to run as: NAME, UID, NAME:GROUP or UID:GID (None: the sandbox's own)."""
    if user is not None and not USER_RE.fullmatch(user):
        raise InvalidError(
            f"invalid {flag} {user[:80]!r}", hint=f"use NAME, UID, NAME:GROUP or UID:GID, e.g. {flag} root or {flag} 1000:1000"
        )
    return user


def check_path(path: str, what: str = "path") -> str:
    return check_text(path, f"{what} {path[:80]!r}", MAX_PATH)


def check_mode(mode: int | str) -> int:
    """A file's mode: octal text ("644", "0755", "0o600") or a number, 0-0777 only."""
    text = str(mode)
    try:
        value = int(text.removeprefix("0o"), 8) if isinstance(mode, str) else int(mode)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_FILE_MODE:
        raise InvalidError(
            f"invalid file mode {text!r}",
            hint="use octal permissions 000-777, e.g. 644 or 755 (setuid, setgid and sticky bits are refused)",
        )
    return value


def check_finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise InvalidError(f"{what} must be a finite number, got {value!r}")
    return value


def check_secrets(v: dict[str, str]) -> dict[str, str]:
    check_count(v, MAX_ENV, "secrets")
    for name, value in v.items():
        if SECRET_NAME_RE.fullmatch(name) is None:
            raise InvalidError(f"invalid secret name {name!r}", hint="a secret name is an env variable name, e.g. API_TOKEN")
        if "\x00" in value or len(value) > MAX_ARG:
            raise InvalidError(
                f"the value of secret {name} has a NUL byte or is over {MAX_ARG} bytes", hint="secrets are passed as env"
            )
    return v


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    check_count(labels, MAX_LABELS, "labels")
    for key, value in labels.items():
        check_label(key, value)
    return labels


def check_label(key: str, value: str) -> None:
    if LABEL_KEY_RE.fullmatch(key) is None:
        raise InvalidError(
            f"invalid label key {key!r}", hint="keys are 1-63 letters, digits, '.', '_', '/' or '-', e.g. team=infra"
        )
    if len(value) > 256 or "\n" in value or "\x00" in value:
        raise InvalidError(f"invalid value for label {key!r}", hint="label values are one line of at most 256 characters")


MIN_DISK, MAX_DISK = 16 << 20, 1 << 40  # --disk: a filesystem this small still holds its journal and a few files


def size_between(value: str | int, low: int, high: int, flag: str, hint: str) -> int:
    """A size (bytes, or text with a unit) within ``[low, high]``; else ``invalid`` naming ``flag``."""
    from hutch.units import format_size, parse_size

    size = parse_size(value)
    if not low <= size <= high:
        raise InvalidError(
            f"{flag} must be between {format_size(low)} and {format_size(high)}, got {format_size(size)}", hint=hint
        )
    return size
