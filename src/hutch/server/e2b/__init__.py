"""The E2B-compatible API: E2B's own SDKs run unchanged against hutch (docs/e2b.md).

An adapter: it calls the same Service as every other route, never a provider. Its parts:
:mod:`.control` (``/e2b/api``, REST), :mod:`.envd` (``/e2b/envd``: Connect calls and
``/files``), :mod:`.ports` (a sandbox's other ports: the code interpreter's),
:mod:`.copies` (fork, snapshots, network updates), :mod:`.network` (E2B's egress rules as a
hutch policy), :mod:`.auth` (who a request is), :mod:`.connect` (the Connect wire)."""

from __future__ import annotations

from fastapi import FastAPI

from hutch.server.e2b import control, envd
from hutch.server.e2b.auth import Tokens, tokens_for
from hutch.server.e2b.ports import Relay
from hutch.server.e2b.process import Processes
from hutch.service import Service

PREFIXES = ("/e2b/", "/files")


def is_e2b(path: str) -> bool:
    return path.startswith("/e2b/") or path == "/files"


def install(app: FastAPI, service: Service) -> Tokens:
    tokens = tokens_for(service.settings.home)
    procs = Processes(service)
    app.include_router(control.router(service, tokens))
    app.include_router(envd.router(service, tokens, procs))
    app.add_middleware(Relay, service=service, procs=procs)  # other ports of a sandbox (the code interpreter's)
    return tokens
