"""SDK result types: ExecResult, FileInfo, OutputChunk."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


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
    def from_dict(cls, d: dict[str, Any]) -> ExecResult:
        def stream(name: str) -> tuple[str, bytes]:
            if d.get(f"{name}_base64"):
                raw = base64.b64decode(d[name])
                return raw.decode("utf-8", errors="replace"), raw
            return d[name], d[name].encode()

        out, out_raw = stream("stdout")
        err, err_raw = stream("stderr")
        return cls(
            run_id=d["run_id"],
            sandbox_id=d["sandbox_id"],
            exit_code=d["exit_code"],
            status=d["status"],
            stdout=out,
            stderr=err,
            stdout_raw=out_raw,
            stderr_raw=err_raw,
            truncated=d["truncated"],
            duration_ms=d["duration_ms"],
            stdout_bytes=d.get("stdout_bytes", 0),
            stderr_bytes=d.get("stderr_bytes", 0),
            signal=d.get("signal"),
            error=d.get("error"),
            stored_truncated=bool(d.get("stored_truncated")),
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
