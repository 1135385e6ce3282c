"""The Python SDK: ``Sandbox`` and ``AsyncSandbox``, kept in parity by a test.

    with hutch.Sandbox.create(memory="512M") as sbx:
        r = sbx.exec("echo hi")
        print(r.exit_code, r.stdout)

A non-zero exit of the workload never raises: read ``exit_code`` and ``status``.
hutch's own failures raise :class:`hutch.HutchError` (with ``kind`` and ``hint``).

Each sandbox holds a client (:mod:`hutch.client`) and its namespaces, each in its module::

    sync.py     Sandbox                 create, run_once, connect, list, restore; exec, pty; lifecycle; workspace
    aio.py      AsyncSandbox            the same, awaited (tests/unit/test_sdk_parity.py keeps them in step)
    files.py    Files, AsyncFiles       sbx.files
    images.py   Images, AsyncImages     the image store: pull, import_, list, inspect, rm, prune
    runs.py     Run(s), AsyncRun(s)     sbx.runs, and exec(..., background=True)
    policy.py   Policy, AsyncPolicy     sbx.policy
    pty.py      Pty, AsyncPty           sbx.pty(...)
    results.py  ExecResult, FileInfo, OutputChunk
    forks.py                            the children fork() made, destroyed with their parent
    oneshot.py                          run_once's request and result (hutch run in one call)
"""

from __future__ import annotations

from hutch.sdk.aio import AsyncSandbox
from hutch.sdk.files import AsyncFiles, Files
from hutch.sdk.images import AsyncImages, Images
from hutch.sdk.policy import AsyncPolicy, Policy
from hutch.sdk.pty import AsyncPty, Pty
from hutch.sdk.results import ExecResult, FileInfo, OutputChunk
from hutch.sdk.runs import AsyncRun, AsyncRuns, Run, Runs
from hutch.sdk.sync import Sandbox

__all__ = [
    "AsyncFiles",
    "AsyncImages",
    "AsyncPolicy",
    "AsyncPty",
    "AsyncRun",
    "AsyncRuns",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "Files",
    "Images",
    "OutputChunk",
    "Policy",
    "Pty",
    "Run",
    "Runs",
    "Sandbox",
]
