"""A hutch daemon that kills itself (SIGKILL) at one step of a claim's lifecycle.

``python -m hutch.testing.crash STEP`` serves like ``hutch serve`` (settings from the
environment: ``HUTCH_HOME`` ...), with the Service's ``on_step`` hook set to SIGKILL the
process when STEP is reached: one of after_intent, create_sent, create_answered,
delete_attempt, delete_accepted, mid_proof (``hutch.service.claims.STEPS``). The crash
tests (tests/integration/test_unikraft_crash.py) use it to prove that nothing is lost or
created twice whatever step a daemon dies at.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from hutch.config import Settings
from hutch.server.daemon import serve
from hutch.service.claims import STEPS, StepHook


def kill_at(step: str) -> StepHook:
    """A hook that SIGKILLs this process when ``step`` is reached."""

    def hook(reached: str) -> None:
        if reached == step:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hutch.testing.crash", description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=STEPS)
    args = parser.parse_args(argv)
    return serve(Settings.load(), on_step=kill_at(args.step))


if __name__ == "__main__":
    sys.exit(main())
