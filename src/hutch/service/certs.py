"""Client certificates of the gateway: issued from its CA (``hutch gateway init``), each
bound to an API key, listed, revoked; and, on each request that presents one, resolved to
the actor of its key (:mod:`hutch.server.auth`).

A presented certificate has already passed the TLS handshake (it chains to the gateway's
CA and is within its dates); here it must also be one this gateway recorded (by its
SHA-256 fingerprint), not revoked, not expired on the gateway's clock, and its key must
be live. Revoking a certificate, or its key, takes effect on the next request: nothing is
cached and nothing restarts.
"""

from __future__ import annotations

import builtins
import ssl
import time
from typing import TYPE_CHECKING, Any

from hutch import pki
from hutch.errors import InvalidError, UnauthorizedError

if TYPE_CHECKING:
    from hutch.actors import Actor
    from hutch.service import Service

CERT_HINT = "ask the gateway's admin for a new certificate (hutch gateway issue NAME), then hutch login BUNDLE"
DEFAULT_TTL = 90 * 86400.0


def public(row: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    state = "revoked" if row["revoked_at"] else ("expired" if row["expires_at"] <= now else "active")
    return {**row, "state": state}


class Certificates:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self.files = pki.GatewayFiles.of(service.settings.home)

    def issue(
        self,
        name: str,
        *,
        key: str | None = None,
        ttl: float | None = None,
        csr: str | None = None,
        url: str | None = None,
        scopes: list[str] | None = None,
    ) -> dict[str, Any]:
        """A certificate for ``name`` bound to ``key`` (a key's id or name; none: a new key
        named ``name`` with ``scopes``), and the profile bundle that carries it."""
        pki.check_name(name)
        ttl = DEFAULT_TTL if ttl is None else ttl
        url = url or self.files.url()
        if not url.startswith("https://"):
            raise InvalidError(
                "the bundle needs the gateway's https:// URL",
                hint="pass --url https://HOST:PORT (or give it to hutch gateway init --url)",
            )
        pki.load_ca(self.files)  # no CA: refused before a key is made
        if csr is not None:
            pki.load_csr(csr, name)  # a CSR for another name: refused before a key is made
        if key is not None:
            row = self.svc.keys.get(key)
            if row["state"] != "active":
                raise InvalidError(
                    f"key {row['name']} ({row['id']}) is {row['state']}", hint="bind the certificate to a live key"
                )
            if scopes:
                raise InvalidError("--scope applies to a new key, not to --key", hint="drop --scope, or drop --key")
            key_row = row
        else:
            key_row = self.svc.keys.create(name, scopes=scopes or None, ttl=ttl)
            key_row.pop("key", None)  # the certificate is the credential: the bearer secret is never shown
        issued = pki.issue_client(self.files, name, key_row["id"], ttl, csr)
        now = time.time()
        row = {
            "fingerprint": issued.fingerprint,
            "serial": issued.serial,
            "name": name,
            "key_id": key_row["id"],
            "created_at": now,
            "expires_at": issued.not_after,
        }
        self.store.certificates.insert(row)
        ca = self.files.ca_cert.read_bytes()
        key_pem = pki.key_pem(issued.key) if issued.key is not None else None
        return {
            "certificate": public({**row, "revoked_at": None}, now),
            "key": {"id": key_row["id"], "name": key_row["name"], "scopes": key_row["scopes"]},
            "bundle": pki.bundle(name, url, ca, pki.cert_pem(issued.cert), key_pem),
        }

    def list(self) -> builtins.list[dict[str, Any]]:
        now = time.time()
        return [public(r, now) for r in self.store.certificates.all()]

    def revoke(self, ref: str) -> builtins.list[dict[str, Any]]:
        """Every live certificate ``ref`` names (a name, serial or fingerprint); each stops at the next request."""
        rows = self.store.certificates.find(ref)
        now = time.time()
        self.store.certificates.revoke([r["fingerprint"] for r in rows], now)
        return [public({**r, "revoked_at": now}, now) for r in rows]

    # -- each request --------------------------------------------------------------------

    def authenticate(self, pem: str) -> Actor:
        """The actor of a request whose TLS connection presented ``pem``."""
        fp = pki.fingerprint(ssl.PEM_cert_to_DER_cert(pem))
        row = self.store.certificates.get(fp)
        if row is None:
            raise UnauthorizedError(
                "this client certificate was not issued by this gateway (or its record is gone)", hint=CERT_HINT
            )
        if row["revoked_at"]:
            raise UnauthorizedError(f"the client certificate {row['name']} (serial {row['serial']}) was revoked", hint=CERT_HINT)
        if row["expires_at"] <= time.time():
            raise UnauthorizedError(f"the client certificate {row['name']} (serial {row['serial']}) has expired", hint=CERT_HINT)
        return self.svc.keys.actor(row["key_id"], via="certificate")
