"""hutch.jsonwire gives what json gives: the same text, the same values, the same errors."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from hutch import jsonwire

VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    2**70,
    1.5,
    -0.0,
    1e300,
    float("inf"),
    float("-inf"),
    "",
    "plain",
    'é ü \u2028 \x00 \x1f " \\ / \n\t',
    "\U0001f600",
    [],
    {},
    [1, "a", None, [2, [3, {}]]],
    {"a": 1, "b": [True, False], "c": {"d": "e"}, "": None},
    {"type": "stdout", "data": "x" * 70000, "base64": False},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_and_loads_match_json(value: object) -> None:
    text = jsonwire.dumps(value)
    assert text == json.dumps(value)
    assert jsonwire.dumps(value) == json.dumps(value)
    back, expected = jsonwire.loads(text), json.loads(text)
    assert repr(back) == repr(expected)
    assert jsonwire.loads(text.encode()) == expected or (isinstance(expected, float) and math.isnan(expected))


def test_random_documents_round_trip_like_json() -> None:
    rng = random.Random(7)

    def make(depth: int) -> object:
        kind = rng.randrange(7 if depth < 4 else 4)
        if kind == 0:
            return rng.randrange(-(10**12), 10**12)
        if kind == 1:
            return rng.random() * 10 ** rng.randrange(-5, 5)
        if kind == 2:
            return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x2FFFF)])) for _ in range(rng.randrange(12)))
        if kind == 3:
            return rng.choice([None, True, False])
        if kind == 4:
            return [make(depth + 1) for _ in range(rng.randrange(5))]
        return {str(make(depth + 1)): make(depth + 1) for _ in range(rng.randrange(5))}

    for _ in range(300):
        doc = make(0)
        text = json.dumps(doc)
        assert jsonwire.dumps(doc) == text
        assert jsonwire.loads(text) == json.loads(text)
        spaced = " \n\t" + text + "\r\n "
        assert jsonwire.loads(spaced.encode()) == json.loads(spaced.encode())


def test_nan_is_written_and_read_as_json_does() -> None:
    assert jsonwire.dumps([float("nan")]) == json.dumps([float("nan")]) == "[NaN]"
    assert math.isnan(jsonwire.loads("NaN"))


@pytest.mark.parametrize(
    "text",
    ["", "   ", "{", "[1,]", '{"a" 1}', "[1] 2", "nul", '"\\x"', '"a\nb"', "01", "\ufeff{}", "{} {}", "[1,2", "tru"],
)
def test_bad_documents_raise_what_json_raises(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        jsonwire.loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


@pytest.mark.parametrize("raw", [b"\xef\xbb\xbf{}", '{"a": "\u00e9"}'.encode("utf-16"), b'{"a": "\xff"}', b""])
def test_bytes_that_are_not_plain_utf8_get_jsons_own_answer(raw: bytes) -> None:
    try:
        expected: object = json.loads(raw)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            jsonwire.loads(raw)
    else:
        assert jsonwire.loads(raw) == expected


def test_what_cannot_be_written_raises_type_error_like_json() -> None:
    for bad in (object(), {1j: 2}, [b"bytes"]):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            jsonwire.dumps(bad)


def test_a_circular_document_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        jsonwire.dumps(loop)


def test_importing_it_imports_neither_json_nor_re() -> None:
    code = "import sys, hutch.jsonwire as j; j.loads(j.dumps({'a': [1, 2.5, None]})); print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'json'" not in loaded and "'re'" not in loaded and "'enum'" not in loaded
