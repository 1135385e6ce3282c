"""The Python SDK: ``Sandbox`` and ``AsyncSandbox``, kept in parity by a test.

    with hutch.Sandbox.create(memory="512M") as sbx:
        r = sbx.exec("echo hi")
        print(r.exit_code, r.stdout)

A non-zero exit of the workload never raises: read ``exit_code`` and ``status``.
hutch's own failures raise :class:`hutch.HutchError` (with ``kind`` and ``hint``).
"""

from __future__ import annotations

from hutch.sdk.policy import AsyncPolicy, Policy
from hutch.sdk.pty import AsyncPty, Pty
from hutch.sdk.results import ExecResult, FileInfo, OutputChunk
from hutch.sdk.runs import AsyncRun, AsyncRuns, Run, Runs
from hutch.sdk.sync import AsyncFiles, AsyncSandbox, Files, Sandbox

__all__ = [
    "AsyncFiles",
    "AsyncPolicy",
    "AsyncPty",
    "AsyncRun",
    "AsyncRuns",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "Files",
    "OutputChunk",
    "Policy",
    "Pty",
    "Run",
    "Runs",
    "Sandbox",
]
