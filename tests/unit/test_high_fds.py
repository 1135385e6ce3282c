"""With its open-file limit raised, the daemon holds descriptors numbered 1024 and above:
nothing on its side may wait on them with select() (FD_SETSIZE), which refused to (a create
failed with 'filedescriptor out of range in select()' once 1000 idle sandboxes were held)."""

from __future__ import annotations

import ast
import contextlib
import os
import resource
from pathlib import Path

import pytest

import hutch
from hutch.providers.local.host import readable

SRC = Path(hutch.__file__).resolve().parent


def test_readable_watches_descriptors_above_fd_setsize() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.fail(f"this test needs a hard open-file limit of 4096 or more (it is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    r, w = os.pipe()
    high_r, high_w = 3000, 3001
    try:
        os.dup2(r, high_r)
        os.dup2(w, high_w)
        os.close(r)
        os.close(w)  # only the high numbers hold the pipe now
        assert readable([high_r], 0.01) == []
        os.write(high_w, b"x")
        assert readable([high_r], 5.0) == [high_r]
        assert os.read(high_r, 1) == b"x"
        os.close(high_w)
        assert readable([high_r], 5.0) == [high_r]  # the end of the pipe is readable too
        assert os.read(high_r, 1) == b""
    finally:
        for fd in (r, w, high_r, high_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_daemon_side_module_calls_select_select() -> None:
    """The in-sandbox agent (its own process, few descriptors) may; nothing the daemon runs may."""
    callers = []
    for path in SRC.rglob("*.py"):
        if "agent" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "select" and getattr(node.value, "id", None) == "select":
                callers.append(str(path.relative_to(SRC)))
    assert callers == []
