"""Images for local sandboxes: references, the content-addressed store, layer unpacking, root filesystems.

Modules (each owned by one responsibility):

- ``types``: what the rest of the local provider sees of an image (``ResolvedImage``, ``ImageConfig``,
  the ``ImageSource`` protocol it resolves references through).
"""
