"""The E2B adapter's process table (pids handed out per sandbox), kept in the store so a command is
found again after a daemon restart; the server reaches it only through the Service."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hutch.store.e2b import ProcessRow

if TYPE_CHECKING:
    from hutch.service import Service


class E2bProcesses:
    def __init__(self, svc: Service) -> None:
        self.svc = svc

    def add(self, row: ProcessRow) -> None:
        self.svc.store.e2b_processes.add(row)

    def find(self, sandbox_id: str, pid: int | None, tag: str | None) -> ProcessRow | None:
        return self.svc.store.e2b_processes.find(sandbox_id, pid, tag)

    def live_of(self, sandbox_id: str) -> list[ProcessRow]:
        return self.svc.store.e2b_processes.live_of(sandbox_id)

    def next_pid(self) -> int:
        return self.svc.store.e2b_processes.next_pid()
