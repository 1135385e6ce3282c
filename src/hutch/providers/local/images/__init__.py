"""Images for local sandboxes: references, the content-addressed store, layer unpacking, root filesystems.

Modules (each owned by one responsibility):

- ``types``: what the rest of the local provider sees of an image (``ResolvedImage``, ``ImageConfig``,
  the ``ImageSource`` protocol it resolves references through).
- ``unpack``: ``unpack_layer`` extracts one layer blob (hostile input) into its own directory,
  with ``layerpolicy`` (what each entry may be), ``decompress`` (the bounded tar stream) and
  ``fdtree`` (writing only through directory fds that never follow a symlink).
- ``flatten``: one root filesystem from unpacked layers (hardlinks, OCI whiteouts applied).
"""
