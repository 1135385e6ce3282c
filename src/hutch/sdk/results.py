"""SDK result types: ExecResult, FileInfo, OutputChunk.

:class:`ExecResult` is the SDK's one exec result: made from the daemon's answer
(:class:`hutch.wire.ExecResult`) or from a finished run's record and its output; its
fields are the wire's, with the output decoded (``stdout``, ``stdout_raw``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hutch import wire


@dataclass(frozen=True)
class ExecResult:
    run_id: str
    sandbox_id: str
    exit_code: int
    status: str
    stdout: str
    stderr: str
    stdout_raw: bytes = field(repr=False)
    stderr_raw: bytes = field(repr=False)
    truncated: bool
    duration_ms: float
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    signal: int | None = None
    error: str | None = None
    stored_truncated: bool = False  # the run's copy kept on disk (Run.stream, hutch poll) stops at the disk cap

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.status == "completed"

    @classmethod
    def from_dict(cls, d: wire.ExecResult) -> ExecResult:
        """From the daemon's answer to a foreground exec."""
        out = base64.b64decode(d["stdout"]) if d.get("stdout_base64") else d["stdout"].encode()
        err = base64.b64decode(d["stderr"]) if d.get("stderr_base64") else d["stderr"].encode()
        return cls(
            run_id=d["run_id"],
            sandbox_id=d["sandbox_id"],
            exit_code=d["exit_code"],
            status=d["status"],
            stdout=out.decode("utf-8", errors="replace") if d.get("stdout_base64") else d["stdout"],
            stderr=err.decode("utf-8", errors="replace") if d.get("stderr_base64") else d["stderr"],
            stdout_raw=out,
            stderr_raw=err,
            truncated=d.get("truncated", False),
            duration_ms=d["duration_ms"],
            stdout_bytes=d.get("stdout_bytes", 0),
            stderr_bytes=d.get("stderr_bytes", 0),
            signal=d.get("signal"),
            error=d.get("error"),
            stored_truncated=bool(d.get("stored_truncated")),
        )

    @classmethod
    def from_run(cls, run: wire.RunRecord, stdout: bytes, stderr: bytes, cap: int) -> ExecResult:
        """From a finished run's record and the first ``cap`` bytes of its output."""
        return cls(
            run_id=run["id"],
            sandbox_id=run["sandbox_id"],
            exit_code=125 if run["exit_code"] is None else run["exit_code"],
            status=run["status"],
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            stdout_raw=stdout,
            stderr_raw=stderr,
            truncated=bool(run["truncated"]) or run["stdout_bytes"] > cap or run["stderr_bytes"] > cap,
            duration_ms=run["duration_ms"] or 0.0,
            stdout_bytes=run["stdout_bytes"],
            stderr_bytes=run["stderr_bytes"],
            signal=run.get("signal"),
            error=run.get("error"),
            stored_truncated=bool(run["truncated"]),  # the record's truncated is its stored copy's
        )


@dataclass(frozen=True)
class FileInfo:
    name: str
    type: str
    size: int
    mode: int
    mtime: float


def _data(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a run's output, with where it starts in its stream."""

    stream: str
    data: bytes
    offset: int

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")
