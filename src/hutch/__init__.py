"""hutch: run AI-agent tasks in isolated sandboxes."""

from __future__ import annotations

__version__ = "0.1.0"

from hutch.errors import HutchError
from hutch.sdk import AsyncSandbox, ExecResult, FileInfo, Sandbox

__all__ = ["AsyncSandbox", "ExecResult", "FileInfo", "HutchError", "Sandbox", "__version__"]
