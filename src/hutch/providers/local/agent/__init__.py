"""The in-sandbox agent: PID 2 of every local sandbox, and the supervisor of each run.

This package runs *inside* the sandbox, under the host's ``python3`` (3.10 or newer,
checked by ``doctor`` and at create) with ``-I -S -B``: standard library only, and it
never imports hutch. The daemon binds each of its files read-only into
``/.hutch/agent/`` and starts it as ``python3 -I -S -B /.hutch/agent SOCKET READY_FD``
(:mod:`.__main__`). Its modules import each other relatively, so the same files are
also ``hutch.providers.local.agent`` on the host, where the daemon imports :mod:`.wire`
(the protocol both sides speak) and the type checker reads the rest.

- :mod:`.wire`: the protocol (framing, messages, limits), shared with the daemon
- :mod:`.server`: the agent's loop, its requests, the spare supervisors
- :mod:`.supervisor`: one run, as a state machine; :mod:`.spawn`, :mod:`.hostlink`,
  :mod:`.output` its parts
- :mod:`.files`, :mod:`.procs`: file requests; processes, signals, ``ps``

Its start is on the path of every cold create's first run and every wake of an idle
sandbox, so what that run waits for imports only C modules and small ones: the C halves of
``socket``, ``signal`` and ``json`` (their Python modules import ``enum`` and ``re``), no
``contextlib`` (:class:`.wire.ignoring`), no ``array``, and no ``subprocess`` (``threading``,
``selectors``, ``locale`` ...): the first run's command is forked by :func:`.spawn._fork`,
while the agent imports ``subprocess`` for the runs after it (Popen's vfork is cheaper than
forking a Python process). tests/unit/test_agent_spawn.py checks both.
"""
