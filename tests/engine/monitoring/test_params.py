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
