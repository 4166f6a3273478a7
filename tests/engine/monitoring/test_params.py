"""Query parameters decode with Go's strconv rules and refuse what Go refuses."""

from __future__ import annotations

import pytest

from headwater.server.monitoring.params import BadRequest, Query


@pytest.mark.parametrize("text", ["1", "t", "T", "true", "TRUE", "True"])
def test_true_spellings(text: str) -> None:
    assert Query.parse(f"subs={text}").boolean("subs") is True


@pytest.mark.parametrize("text", ["0", "f", "F", "false", "FALSE", "False", ""])
def test_false_spellings_and_empty(text: str) -> None:
    assert Query.parse(f"subs={text}").boolean("subs") is False


def test_absent_parameters_are_zero_values() -> None:
    q = Query.parse("")
    assert q.get("x") == ""
    assert q.boolean("x") is False
    assert q.integer("x") == 0
    assert q.unsigned("x") == 0


@pytest.mark.parametrize("text", ["yes", "on", "2", "tRuE"])
def test_bad_boolean_is_a_bad_request(text: str) -> None:
    with pytest.raises(BadRequest, match="Error decoding boolean for 'subs'"):
        Query.parse(f"subs={text}").boolean("subs")


def test_integers() -> None:
    q = Query.parse("a=42&b=-5&c=%2B7&d=abc&e=1.5&f=99999999999999999999&g= 4")
    assert q.integer("a") == 42
    assert q.integer("b") == -5
    assert q.integer("c") == 7
    for name in "defg":
        with pytest.raises(BadRequest, match=f"Error decoding int for '{name}'"):
            q.integer(name)


def test_unsigned_refuses_signs() -> None:
    q = Query.parse("cid=12&neg=-1&plus=%2B1")
    assert q.unsigned("cid") == 12
    with pytest.raises(BadRequest, match="uint64"):
        q.unsigned("neg")
    with pytest.raises(BadRequest, match="uint64"):
        q.unsigned("plus")


def test_first_value_wins() -> None:
    assert Query.parse("limit=3&limit=9").integer("limit") == 3


@pytest.mark.parametrize(
    ("query", "kind", "message"),
    [
        # nats-server 2.15's answers, word for word (Go's strconv errors, %q-quoted input).
        ("subs=maybe", "boolean", """'subs': strconv.ParseBool: parsing "maybe": invalid syntax"""),
        (
            "subs=%22a%5Cb%01%C3%A9",
            "boolean",
            """'subs': strconv.ParseBool: parsing "\\"a\\\\b\\x01é": invalid syntax""",
        ),
        ("subs=x", "int", """'subs': strconv.Atoi: parsing "x": invalid syntax"""),
        (
            "subs=99999999999999999999",
            "int",
            """'subs': strconv.Atoi: parsing "99999999999999999999": value out of range""",
        ),
        ("subs=-1", "uint64", """'subs': strconv.ParseUint: parsing "-1": invalid syntax"""),
        (
            "subs=99999999999999999999999",
            "uint64",
            """'subs': strconv.ParseUint: parsing "99999999999999999999999": value out of range""",
        ),
    ],
)
def test_error_texts_are_go_strconv_errors(query: str, kind: str, message: str) -> None:
    q = Query.parse(query)
    decode = {"boolean": q.boolean, "int": q.integer, "uint64": q.unsigned}[kind]
    with pytest.raises(BadRequest) as caught:
        decode("subs")
    assert str(caught.value) == f"Error decoding {kind} for {message}"
