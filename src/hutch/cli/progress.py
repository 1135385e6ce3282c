"""The progress bar of a push (``--sync``, ``hutch push``): rich, on a terminal only."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from hutch.cli.base import Ctx


@contextlib.contextmanager
def progress_bar(obj: Ctx, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on a terminal (bytes packed so far); nothing with --json or a pipe."""
    if obj.json or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda n: bar.advance(task, n)
