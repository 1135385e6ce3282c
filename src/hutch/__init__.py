"""hutch: run AI-agent tasks in isolated sandboxes."""

from __future__ import annotations

from hutch._version import __version__

TYPE_CHECKING = False  # (typing stays out of the CLI's start: see hutch.cli.plain)
if TYPE_CHECKING:
    from typing import Any

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
