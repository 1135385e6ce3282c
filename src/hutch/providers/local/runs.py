"""Reading what supervisors write under a sandbox's ``runs/`` directory, safely.

The directory is writable by the sandbox (its supervisors write there), so every open
walks it with ``O_NOFOLLOW`` from a directory descriptor and accepts regular files only:
a workload that swaps a file for a symlink or a FIFO gets an error, never a host file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
from pathlib import Path
from typing import Any

from hutch.errors import InvalidError, NotFoundError
from hutch.models import RawOutput

STATUS_MAX = 64 << 10
HEADER = 35  # "run_<19 hex> o 0000000a\n": run id (23), space, stream, space, 8 hex, newline


def _open(base: Path, parts: list[str]) -> int:
    fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            if "/" in part or part in ("", ".", ".."):
                raise InvalidError(f"invalid name {part!r}")
            last = i == len(parts) - 1
            flags = os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_RDONLY | os.O_NONBLOCK if last else os.O_PATH | os.O_DIRECTORY)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotFoundError(f"{'/'.join(parts)} is not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_range(runs_dir: Path, parts: list[str], offset: int, limit: int) -> tuple[bytes, int]:
    """``limit`` bytes from ``offset``, and the file's size; (b"", 0) when it does not exist."""
    try:
        fd = _open(runs_dir, parts)
    except (FileNotFoundError, NotADirectoryError):
        return b"", 0
    except OSError as exc:
        raise NotFoundError(f"cannot read run output: {exc.strerror}") from exc
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, max(0, min(limit, size - offset)), offset) if offset < size else b"", size
    finally:
        os.close(fd)


def read_status(runs_dir: Path, run_id: str) -> dict[str, Any] | None:
    data, size = read_range(runs_dir, [run_id, "status"], 0, STATUS_MAX)
    if not data or size > STATUS_MAX:
        return None
    with contextlib.suppress(ValueError):
        status = json.loads(data)
        if isinstance(status, dict) and isinstance(status.get("exit"), int):
            return status
    return None


def record_size(data: bytes) -> int | None:
    """The full size (header included) of the record ``data`` starts with, if it starts with one."""
    try:
        _run, _stream, size_hex = data[:HEADER].decode("ascii").split()
        return HEADER + int(size_hex, 16)
    except ValueError:
        return None


_HEADER_RE = re.compile(rb"run_[0-9a-f]{19} [oe] [0-9a-f]{8}\n")


def parse_transcript(data: bytes, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Records in ``data`` (read at ``offset``), and the offset after the last whole one.

    An offset that is not a record boundary (a hand-typed --offset) is moved forward to
    the next record, so following never stalls.
    """
    records: list[dict[str, Any]] = []
    pos = 0
    if data and not _HEADER_RE.match(data):
        m = _HEADER_RE.search(data)
        pos = m.start() if m else max(0, len(data) - HEADER)
    while pos + HEADER <= len(data):
        head = data[pos : pos + HEADER]
        try:
            run_id, stream, size_hex = head.decode("ascii").split()
            size = int(size_hex, 16)
        except ValueError:
            break  # not a record boundary: stop rather than guess
        if pos + HEADER + size > len(data):
            break
        chunk = data[pos + HEADER : pos + HEADER + size]
        records.append(
            {"offset": offset + pos, "run_id": run_id, "stream": "stderr" if stream == "e" else "stdout", "data": chunk}
        )
        pos += HEADER + size
    return records, offset + pos


def raw_output(reply: dict[str, Any], stdout: bytes, stderr: bytes, oom: bool) -> RawOutput:
    """What the agent said of a finished run, as the provider reports it."""
    sig = int(reply.get("signal") or 0)
    reason = reply.get("reason")
    return RawOutput(
        exit_code=int(reply["exit"]),
        signal=sig,
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        stdout_bytes=int(reply.get("stdout_bytes", len(stdout))),
        stderr_bytes=int(reply.get("stderr_bytes", len(stderr))),
        truncated_on_disk=bool(reply.get("truncated")),
        timed_out=reason in ("timeout", "idle_timeout"),
        reason=reason,
        killed=reason == "killed",
        oom_killed=oom and sig == signal.SIGKILL and reason is None,
        spawn_error=reply.get("spawn_error"),
        finished_at=reply.get("finished_at"),
    )
