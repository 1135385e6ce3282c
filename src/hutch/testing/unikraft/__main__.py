"""``python -m hutch.testing.unikraft``: the test server, until SIGTERM (see :mod:`.server`)."""

import sys

from hutch.testing.unikraft.server import main

sys.exit(main())
