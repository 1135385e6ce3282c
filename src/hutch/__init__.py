"""hutch: run AI-agent tasks in isolated sandboxes."""

from __future__ import annotations

__version__ = "0.1.0"

from hutch.errors import HutchError
from hutch.sdk import AsyncRun, AsyncSandbox, ExecResult, FileInfo, OutputChunk, Run, Sandbox

__all__ = [
    "AsyncRun",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "HutchError",
    "OutputChunk",
    "Run",
    "Sandbox",
    "__version__",
]
