"""The gateway's client certificates (``hutch gateway issue|certs|revoke``) and exposed
ports (``hutch expose|unexpose``): the requests and the answers."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

__all__ = [
    "CertificateIssued",
    "CertificateKey",
    "CertificateRecord",
    "CertificateRequest",
    "CertificateState",
    "ExposeRequest",
    "ExposedPort",
    "ProfileBundle",
    "Unexposed",
]

CertificateState = Literal["active", "expired", "revoked"]


class CertificateRequest(TypedDict):
    """``POST /v1/gateway/certificates``: a client certificate for ``name``."""

    name: str
    key: NotRequired[str | None]  # bind to this key (id or name); none: a new key named ``name``
    scopes: NotRequired[list[Literal["read", "write", "approve", "metrics", "admin"]]]  # of the new key
    ttl: NotRequired[float | str | None]  # seconds, or a duration (90d, the default)
    csr: NotRequired[str | None]  # a PEM CSR whose subject is CN=name: the client keeps its key
    url: NotRequired[str | None]  # the gateway's URL in the bundle (default: hutch gateway init --url)


class CertificateRecord(TypedDict):
    fingerprint: str  # SHA-256 of the certificate (DER), hex: how the gateway knows it
    serial: str  # hex
    name: str
    key_id: str  # the API key it acts as
    state: CertificateState
    created_at: float
    expires_at: float
    revoked_at: float | None


class CertificateKey(TypedDict):
    id: str
    name: str
    scopes: list[str]


class ProfileBundle(TypedDict):
    """What ``hutch login`` reads (the file ``hutch gateway issue`` writes)."""

    hutch_profile: int  # the bundle's version (1)
    name: str
    url: str  # https://HOST:PORT of the gateway
    ca: str  # PEM: the CA the gateway's certificate chains to
    cert: str  # PEM: the client's certificate
    key: NotRequired[str]  # PEM: the client's private key (absent when it was issued for a CSR)


class CertificateIssued(TypedDict):
    certificate: CertificateRecord
    key: CertificateKey
    bundle: ProfileBundle


class ExposeRequest(TypedDict):
    """``POST /v1/sandboxes/{ref}/ports``: open a port listening inside the sandbox."""

    port: int  # 1-65535, inside the sandbox (127.0.0.1 or 0.0.0.0 there)
    public: NotRequired[bool]  # default false: the URL carries a signed token, other requests need the key


class ExposedPort(TypedDict):
    sandbox: str  # the sandbox's id
    port: int
    url: str  # opens as it is (a private URL carries its token)
    public: bool
    urls: list[str]  # every route to it: the loopback port, or the gateway's path and host routes
    created_at: float


class Unexposed(TypedDict):
    sandbox: str
    port: int
    closed: bool  # false: it was not exposed (nothing to do)
