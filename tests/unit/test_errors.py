"""The error tree: stable kinds, HTTP statuses, round trips through JSON."""

from __future__ import annotations

import json

import pytest

from hutch import errors
from hutch.errors import KINDS, HutchError, InternalError

EXPECTED_KINDS = {
    "invalid",
    "not_found",
    "conflict",
    "unauthorized",
    "capacity",
    "rate_limited",
    "unavailable",
    "timeout",
    "policy",
    "permission_denied",
    "approval_required",
    "internal",
}


def test_kinds_are_the_documented_ones() -> None:
    assert set(KINDS) == EXPECTED_KINDS
    for kind, cls in KINDS.items():
        assert cls.kind == kind
        assert issubclass(cls, HutchError)
        assert cls.__name__ in (errors.__doc__ or ""), cls.__name__


def test_every_error_class_is_registered() -> None:
    """One class per kind, and any finer class (IncompatibleError) is one of those with its kind:
    a client that reads the error back gets the class registered for the kind."""
    classes = {v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, HutchError) and v is not HutchError}
    assert set(KINDS.values()) <= classes
    for cls in classes - set(KINDS.values()):
        assert issubclass(cls, KINDS[cls.kind]), cls
        assert cls.__name__ in (errors.__doc__ or ""), cls.__name__


@pytest.mark.parametrize("kind", sorted(EXPECTED_KINDS))
@pytest.mark.parametrize("hint", ["do this next", None])
def test_round_trip(kind: str, hint: str | None) -> None:
    original = KINDS[kind](f"something {kind}", hint=hint)
    body = original.to_dict()
    assert body == {"error": {"kind": kind, "message": f"something {kind}"} | ({"hint": hint} if hint else {})}
    back = HutchError.from_dict(json.loads(json.dumps(body)))
    assert type(back) is type(original)
    assert (back.kind, back.message, back.hint, back.status) == (kind, original.message, hint, original.status)
    assert str(back) == original.message
    # the inner object alone is accepted too
    assert type(HutchError.from_dict(body["error"])) is type(original)


def test_statuses_are_http_errors() -> None:
    # The kind travels in the body; two kinds may share a status (policy and
    # permission_denied are both 403 Forbidden).
    statuses = {kind: cls.status for kind, cls in KINDS.items()}
    assert all(400 <= s <= 599 for s in statuses.values()), statuses
    assert statuses["policy"] == statuses["permission_denied"] == 403


def test_client_errors_are_4xx_and_server_errors_5xx() -> None:
    assert KINDS["invalid"].status == 400
    assert KINDS["not_found"].status == 404
    assert KINDS["conflict"].status == 409
    assert KINDS["internal"].status == 500
    assert KINDS["unavailable"].status == 503


def test_unknown_kind_becomes_internal() -> None:
    err = HutchError.from_dict({"error": {"kind": "martian", "message": "what", "hint": "h"}})
    assert isinstance(err, InternalError)
    assert (err.message, err.hint) == ("what", "h")
    assert isinstance(HutchError.from_dict({}), InternalError)


def test_root_defaults() -> None:
    err = HutchError("boom")
    assert (err.kind, err.status, err.hint) == ("internal", 500, None)
    assert err.to_dict() == {"error": {"kind": "internal", "message": "boom"}}


def test_timeout_error_keeps_the_builtin() -> None:
    assert KINDS["timeout"] is errors.TimeoutError_
    assert not issubclass(errors.TimeoutError_, TimeoutError)


def test_approval_required_carries_the_id_both_ways() -> None:
    err = errors.ApprovalRequiredError("needs a human", hint="hutch approve apr_1", approval_id="apr_1")
    body = err.to_dict()
    assert body["error"]["approval_id"] == "apr_1"
    back = HutchError.from_dict(json.loads(json.dumps(body)))
    assert isinstance(back, errors.ApprovalRequiredError) and back.approval_id == "apr_1"
