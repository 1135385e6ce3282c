"""Test doubles and test seams, for hutch's own tests, its benchmarks and anyone testing
against hutch. Production code never imports this package (tests/unit/test_packages.py).

- :mod:`hutch.testing.unikraft`: a Unikraft Cloud stand-in built from the published OpenAPI
  files (``python -m hutch.testing.unikraft``), its sandboxes real local ones.
- :mod:`hutch.testing.crash`: a daemon that kills itself at one step of a claim's lifecycle
  (``python -m hutch.testing.crash STEP``), through the Service's ``on_step`` seam.
- :mod:`hutch.testing.agentprotocol`: a daemon whose sandboxes' agents speak another protocol
  number (``python -m hutch.testing.agentprotocol N``), as if another version of hutch made them.
"""
