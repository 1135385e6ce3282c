"""hutch: run AI-agent tasks in isolated sandboxes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hutch._version import __version__

if TYPE_CHECKING:
    from hutch.errors import HutchError
    from hutch.sdk import (
        AsyncImages,
        AsyncPty,
        AsyncRun,
        AsyncSandbox,
        ExecResult,
        FileInfo,
        Images,
        OutputChunk,
        Pty,
        Run,
        Sandbox,
    )

__all__ = [
    "AsyncImages",
    "AsyncPty",
    "AsyncRun",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "HutchError",
    "Images",
    "OutputChunk",
    "Pty",
    "Run",
    "Sandbox",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """The SDK is imported on first use, so that ``hutch`` itself (and the CLI) start fast."""
    if name == "HutchError":
        from hutch.errors import HutchError

        return HutchError
    if name in __all__:
        from hutch import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'hutch' has no attribute {name!r}")
