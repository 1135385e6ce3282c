"""Built-in providers: ``fake`` (in memory, for tests), ``local`` (bubblewrap + cgroups) and
``unikraft`` (Unikraft Cloud instances). The contract they keep is :mod:`hutch.provider`."""
