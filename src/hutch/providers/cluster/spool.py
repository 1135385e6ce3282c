"""What the gateway keeps of each run on a node: which node run it is, and its output so far.

A run on a node has the node's own id; the gateway's run id maps to it through a small JSON
file written when the node says the run started (so a restarted gateway still finds it).
The output streams through the gateway and is copied here, up to ``cap`` bytes per stream:
when the node is lost, a run's partial output is still readable.

Layout: ``HOME/cluster/sandboxes/SANDBOX/RUN.json`` and ``RUN.stdout`` / ``RUN.stderr``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


class Spool:
    def __init__(self, root: Path, cap: int) -> None:
        self.root = root
        self.cap = cap

    def _dir(self, sandbox_id: str) -> Path:
        return self.root / sandbox_id

    def begin(self, sandbox_id: str, run_id: str, node_run: str) -> None:
        d = self._dir(sandbox_id)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = d / f"{run_id}.json.tmp"
        tmp.write_text(json.dumps({"node_run": node_run}))
        tmp.replace(d / f"{run_id}.json")

    def node_run(self, sandbox_id: str, run_id: str) -> str | None:
        try:
            return str(json.loads((self._dir(sandbox_id) / f"{run_id}.json").read_text())["node_run"])
        except (OSError, ValueError, KeyError):
            return None

    def runs(self, sandbox_id: str) -> dict[str, str]:
        """Node run id -> the gateway's run id, for every run of the sandbox."""
        found = {}
        d = self._dir(sandbox_id)
        for meta in d.glob("*.json") if d.is_dir() else []:
            node_run = self.node_run(sandbox_id, meta.stem)
            if node_run is not None:
                found[node_run] = meta.stem
        return found

    def write(self, sandbox_id: str, run_id: str, stream: str, chunk: bytes) -> None:
        path = self._dir(sandbox_id) / f"{run_id}.{stream}"
        size = path.stat().st_size if path.exists() else 0
        if size < self.cap:
            with open(path, "ab") as f:
                f.write(chunk[: self.cap - size])

    def read(self, sandbox_id: str, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        path = self._dir(sandbox_id) / f"{run_id}.{stream}"
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                f.seek(offset)
                return f.read(limit), size
        except OSError:
            return b"", 0

    def remove(self, sandbox_id: str) -> None:
        shutil.rmtree(self._dir(sandbox_id), ignore_errors=True)
