"""hutch.wire's TypedDicts as pydantic types (server side only: this imports pydantic).

The server's models (hutch.models) use them where a body has no hand-written model of its
own (a record's ``ssh`` and ``credential``), the OpenAPI document (hutch.server.openapi)
publishes every answer with them, and the tests validate what the daemon sends with
:func:`adapter`, unknown keys refused.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin

import typing_extensions
from pydantic import ConfigDict, TypeAdapter

MAKE_TYPEDDICT: Any = typing_extensions.TypedDict  # pydantic takes typing.TypedDict only from Python 3.12 on
REF = "#/components/schemas/{model}"


@functools.cache
def typeddict(td: Any, strict: bool = False) -> Any:
    """``td`` (a hutch.wire TypedDict) as a TypedDict pydantic can use on every Python we
    support; ``strict``: unknown keys are refused."""
    hints = typing.get_type_hints(td, include_extras=True)
    fields: dict[str, Any] = {}
    for key, hint in hints.items():
        inner = pydantic_type(_unwrap(hint), strict)
        fields[key] = Required[inner] if key in td.__required_keys__ else NotRequired[inner]
    clone: Any = MAKE_TYPEDDICT(td.__name__, fields)
    clone.__doc__ = td.__doc__
    clone.__module__ = td.__module__
    if strict:
        clone.__pydantic_config__ = ConfigDict(extra="forbid")
    return clone


def _unwrap(hint: Any) -> Any:
    return get_args(hint)[0] if get_origin(hint) in (Required, NotRequired) else hint


def pydantic_type(tp: Any, strict: bool = False) -> Any:
    """A wire type expression with every TypedDict in it replaced by its pydantic-ready clone."""
    if typing.is_typeddict(tp):
        return typeddict(tp, strict)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return functools.reduce(lambda a, b: a | b, (pydantic_type(a, strict) for a in args))
    if origin is list:
        return types.GenericAlias(list, (pydantic_type(args[0], strict),))
    if origin is dict:
        return types.GenericAlias(dict, (args[0], pydantic_type(args[1], strict)))
    if origin is Literal or origin is None:
        return tp
    raise TypeError(f"no pydantic form for {tp!r}")


@functools.cache
def adapter(tp: Any, strict: bool = True) -> TypeAdapter[Any]:
    """Validates a body against its wire type (strict: unknown keys refused)."""
    return TypeAdapter(pydantic_type(tp, strict))


def schema(tp: Any, components: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a wire type, its named parts added to ``components`` (a name already
    there is kept: the server's own model of that body, which the tests hold to wire)."""
    out = TypeAdapter(pydantic_type(tp)).json_schema(ref_template=REF)
    for name, part in out.pop("$defs", {}).items():
        components.setdefault(name, part)
    if typing.is_typeddict(tp):  # a body of its own: named, like every other
        components.setdefault(tp.__name__, out)
        return {"$ref": REF.format(model=tp.__name__)}
    return out
