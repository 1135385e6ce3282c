"""The Unikraft Cloud test server (:mod:`.server`), its world (:mod:`.testbed`: instances,
commands, faults, the local sandboxes behind them) and its SSH front (:mod:`.sshserver`).

Start it with ``python -m hutch.testing.unikraft --token TOKEN[=ACCOUNT]``; in-process with
:func:`hutch.testing.unikraft.server.serve`.
"""
