"""The one error root of hutch.

Every failure hutch reports is a :class:`HutchError` with a stable ``kind`` (the JSON
``error.kind``), a message and a hint saying what to do next::

    HutchError                 kind               CLI exit code
    +-- InvalidError           invalid            2 (bad input is a usage error)
    +-- NotFoundError          not_found          run/exec: 125, others: 1
    +-- ConflictError          conflict           run/exec: 125, others: 1
    |   +-- IncompatibleError  conflict           (a sandbox made by another version of hutch)
    +-- UnauthorizedError      unauthorized       run/exec: 125, others: 1 (HTTP 401: no valid credential)
    |   +-- ForbiddenError     unauthorized       (HTTP 403: a valid key without the scope a route needs)
    +-- CapacityError          capacity           run/exec: 125, others: 1 (a quota: what is in use)
    +-- RateLimitedError       rate_limited       HTTP 429 with Retry-After: nothing was done, send it again later
    +-- UnavailableError       unavailable        (daemon, bwrap, user namespaces, disk ...)
    +-- TimeoutError_          timeout            run/exec: 124, others: 1
    +-- PolicyError            policy
    +-- PermissionDeniedError  permission_denied  (inside the sandbox)
    +-- ApprovalRequiredError  approval_required  (a human must approve: ``approval_id``)
    +-- InternalError          internal

Foreign exceptions are translated at the boundary where they happen.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing, and collections with it, stays out of the CLI's start)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, ClassVar


class HutchError(Exception):
    """Root of every error hutch raises on purpose."""

    kind: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        return {"error": body}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> HutchError:
        """The error an error body (``{"error": {...}}``, or the inner object) says."""
        body = data.get("error", data)
        cls = KINDS.get(str(body.get("kind", "internal")), InternalError)
        err = cls(str(body.get("message", "unknown error")), body.get("hint"))
        if isinstance(err, ApprovalRequiredError):
            err.approval_id = body.get("approval_id")
        if isinstance(err, RateLimitedError) and isinstance(body.get("retry_after"), (int, float)):
            err.retry_after = float(body["retry_after"])
        return err


class InvalidError(HutchError):
    kind = "invalid"
    status = 400


class NotFoundError(HutchError):
    kind = "not_found"
    status = 404


class ConflictError(HutchError):
    kind = "conflict"
    status = 409


class IncompatibleError(ConflictError):
    """The sandbox is there, but this hutch cannot speak to it: another version of hutch
    made it (its agent speaks another protocol). It can only be destroyed."""


class UnauthorizedError(HutchError):
    kind = "unauthorized"
    status = 401


class ForbiddenError(UnauthorizedError):
    """A valid credential that may not do this (a scope its key lacks): HTTP 403, of the same
    kind, so a client reads it back as an :class:`UnauthorizedError`."""

    status = 403


class CapacityError(HutchError):
    kind = "capacity"
    status = 429


class RateLimitedError(HutchError):
    """Too many requests (or runs) for a key's rate: refused before anything was done, so
    any request may be sent again after ``retry_after`` seconds (the Retry-After header)."""

    kind = "rate_limited"
    status = 429

    def __init__(self, message: str, hint: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, hint)
        self.retry_after = retry_after

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        if self.retry_after is not None:
            body["error"]["retry_after"] = self.retry_after
        return body


class UnavailableError(HutchError):
    kind = "unavailable"
    status = 503


class TimeoutError_(HutchError):  # noqa: N801, N818 - keeps the builtin TimeoutError usable
    kind = "timeout"
    status = 504


class PolicyError(HutchError):
    kind = "policy"
    status = 403


class PermissionDeniedError(HutchError):
    kind = "permission_denied"
    status = 403


class ApprovalRequiredError(HutchError):
    """The sandbox's policy requires a human's approval for this action; ``approval_id``
    names the pending request (``hutch approve ID``), and the caller retries with it."""

    kind = "approval_required"
    status = 403

    def __init__(self, message: str, hint: str | None = None, approval_id: str | None = None) -> None:
        super().__init__(message, hint)
        self.approval_id = approval_id

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        if self.approval_id:
            body["error"]["approval_id"] = self.approval_id
        return body


class InternalError(HutchError):
    kind = "internal"
    status = 500


KINDS: dict[str, type[HutchError]] = {
    c.kind: c
    for c in (
        InvalidError,
        NotFoundError,
        ConflictError,
        UnauthorizedError,
        CapacityError,
        RateLimitedError,
        UnavailableError,
        TimeoutError_,
        PolicyError,
        PermissionDeniedError,
        ApprovalRequiredError,
        InternalError,
    )
}
