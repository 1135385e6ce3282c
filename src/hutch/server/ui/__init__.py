"""The dashboard: server-rendered pages at ``/`` and ``/ui/...`` with a small script of our
own for live updates (no asset from elsewhere: it works offline). An adapter like the API's
routes: it calls the same Service, never a provider, as the request's actor.

- :mod:`.gate`: the session cookie, the public pages, CSRF, the headers of every page;
- :mod:`.html`: escaping and the page's frame (every outside value is escaped there);
- :mod:`.pages`, :mod:`.sandbox`: what each page shows;
- :mod:`.routes`: the routes, and :mod:`.live` the streams the pages follow (Server-Sent Events);
- :mod:`.loopback`: ``POST /v1/ui/links`` (a one-time login link) and, for the local daemon,
  the loopback listener the link opens.

docs/dashboard.md describes it. This package's ``__init__`` imports nothing: the HTTP edge's
auth reads :mod:`.gate` without the routes.
"""
