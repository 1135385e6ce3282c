"""The HTTP edge of the Service (:mod:`hutch.server.app`), the daemon that serves it, and its state directory."""
