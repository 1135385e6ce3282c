"""A hutch daemon whose sandboxes' agents speak another protocol number: as if another
version of hutch had made them.

``python -m hutch.testing.agentprotocol N`` serves like ``hutch serve`` (settings from the
environment: ``HUTCH_HOME`` ...), with :data:`hutch.providers.local.agent.wire.PROTOCOL`
set to N on both sides: the agent it starts in each new sandbox answers ``ping`` with N.
A daemon of this hutch started next on the same home meets those sandboxes as it would
after an upgrade (tests/integration/test_agent_protocol.py).
"""

from __future__ import annotations

import argparse
import re
import sys

from hutch.config import Settings
from hutch.providers import local
from hutch.providers.local.agent import wire
from hutch.server.daemon import serve


def speak(protocol: int) -> None:
    """This process's agents (those it starts from now on) and its own side speak ``protocol``."""
    source, found = re.subn(rb"\nPROTOCOL = \d+\n", b"\nPROTOCOL = %d\n" % protocol, local.AGENT_FILES["wire.py"])
    if found != 1:
        raise RuntimeError("the agent's wire.py has no PROTOCOL line to change")
    local.AGENT_FILES["wire.py"] = source
    wire.PROTOCOL = protocol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hutch.testing.agentprotocol", description=__doc__.split("\n")[0])
    parser.add_argument("protocol", type=int)
    args = parser.parse_args(argv)
    speak(args.protocol)
    return serve(Settings.load())


if __name__ == "__main__":
    sys.exit(main())
