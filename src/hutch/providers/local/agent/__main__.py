"""Start the agent: ``python3 -I -S -B /.hutch/agent SOCKET READY_FD [--user=UID:GID:GROUPS...]``.

Python runs a directory's ``__main__`` with the directory first on ``sys.path``; the
directory above it goes there instead, so the agent's modules import as a package
(``agent``) and find each other relatively, as they do on the host.
"""

import importlib
import os
import sys

sys.path[0] = os.path.dirname(os.path.abspath(sys.path[0]))
if len(sys.argv) > 3 and sys.argv[3].startswith("--user="):
    # A sandbox with its own users: bwrap starts the agent as root inside (it cannot switch to a user and a
    # group of the namespace itself); become that user before anything else, which ends every capability.
    uid, gid, *groups = (int(x) for x in sys.argv.pop(3)[7:].split(":"))
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
importlib.import_module(os.path.basename(os.path.dirname(os.path.abspath(__file__))) + ".server").main()
