"""The HTTP edge of the Service (:mod:`hutch.server.app`) and the daemon launcher."""
