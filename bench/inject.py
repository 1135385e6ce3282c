"""Make a copy of hutch with a known CPU regression, to prove the guard catches it.

    python bench/inject.py /tmp/slow --cli-ms 180 --exec-ms 5 --create-ms 40
    PYTHONPATH=/tmp/slow/src python bench/run.py --quick --guard   # must exit 1

The copy is a ``git clone`` of this checkout's HEAD. Into the copy only (never into
hutch itself), it appends wrappers that burn the given CPU time (thread CPU, so the
cost is the same on a busy machine) before: the CLI's ``main`` (every ``hutch``
process), the local provider's ``exec`` (every run, in the daemon) and its ``create``
(every sandbox). Give each burn the CPU its path costs now (bench/run.py's ``cpu``
section prints it) and the path costs twice as much: a 2x regression. A burn of 0 leaves
that path alone. Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent

BURN = """

# --- appended by bench/inject.py to a throwaway copy: an injected CPU regression ---
def _injected_burn(ms: float) -> None:
    import time as _t

    end = _t.thread_time() + ms / 1000.0
    while _t.thread_time() < end:
        pass
"""

CLI = """
_injected_main = main


def main(argv: list[str] | None = None) -> int:  # type: ignore[no-redef]
    _injected_burn({ms})
    return _injected_main(argv)
"""

PROVIDER = """
_injected_exec = LocalProvider.exec
_injected_create = LocalProvider.create


async def _exec(self, rec, spec):  # type: ignore[no-untyped-def]
    _injected_burn({exec_ms})
    return await _injected_exec(self, rec, spec)


async def _create(self, rec):  # type: ignore[no-untyped-def]
    _injected_burn({create_ms})
    return await _injected_create(self, rec)


LocalProvider.exec = _exec  # type: ignore[method-assign]
LocalProvider.create = _create  # type: ignore[method-assign]
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path, help="where to clone the copy (must not exist)")
    ap.add_argument("--cli-ms", type=float, default=0.0, help="CPU ms burnt by every hutch CLI process")
    ap.add_argument("--exec-ms", type=float, default=0.0, help="CPU ms burnt by the daemon on every exec")
    ap.add_argument("--create-ms", type=float, default=0.0, help="CPU ms burnt by the daemon on every create")
    args = ap.parse_args(argv)
    subprocess.run(["git", "clone", "-q", str(HERE.parent), str(args.dest)], check=True)
    src = args.dest / "src" / "hutch"
    if args.cli_ms:
        cli = src / "cli" / "__init__.py"
        cli.write_text(cli.read_text() + BURN + CLI.format(ms=args.cli_ms))
    if args.exec_ms or args.create_ms:
        prov = src / "providers" / "local" / "__init__.py"
        prov.write_text(prov.read_text() + BURN + PROVIDER.format(exec_ms=args.exec_ms, create_ms=args.create_ms))
    print(f"injected into {args.dest}: cli {args.cli_ms} ms, exec {args.exec_ms} ms, create {args.create_ms} ms of CPU")
    print(f"now: PYTHONPATH={args.dest / 'src'} python bench/run.py --quick --guard")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
