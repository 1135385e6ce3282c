"""Manifests: a sandbox declared in a TOML file (``hutch create --manifest FILE``).

The file feeds the one spec builder (:func:`hutch.wire.build.sandbox_spec`) with the same
arguments the command line gives it; flags given beside it win. Light to import: the
schema (pydantic) loads only when a manifest is read.

- :mod:`hutch.manifest.refs`: secret references (``env:VAR``, ``file:PATH``), read on the caller's side
- :mod:`hutch.manifest.schema`: the file's keys and types
- :mod:`hutch.manifest.load`: reading a file (errors with line numbers), merging flags over it
- :mod:`hutch.manifest.show`: a spec written back as a manifest (``hutch manifest show``)
"""

DEFAULT_NAME = "hutch.toml"  # what --manifest without a file (or the manifest setting) looks for
