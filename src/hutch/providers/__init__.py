"""Built-in providers: ``fake`` (in memory, for tests) and ``local`` (bubblewrap + cgroups)."""
