"""Start the agent: ``python3 -I -S -B /.hutch/agent SOCKET READY_FD``.

Python runs a directory's ``__main__`` with the directory first on ``sys.path``; the
directory above it goes there instead, so the agent's modules import as a package
(``agent``) and find each other relatively, as they do on the host.
"""

import importlib
import os
import sys

sys.path[0] = os.path.dirname(os.path.abspath(sys.path[0]))
importlib.import_module(os.path.basename(os.path.dirname(os.path.abspath(__file__))) + ".server").main()
