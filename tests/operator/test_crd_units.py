"""The CRDs' patterns for durations, sizes and counts agree with the units parsers.

Both ways: every string the parsers accept (the units tests' examples, and generated ones)
matches the pattern, and the API server (the fake one, validating against crds/) refuses
``"1 fortnight"`` and ``"10 gigs"`` before the operator ever sees them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.control.units import (
    format_count,
    format_duration,
    format_size,
    parse_count,
    parse_duration,
    parse_size,
)
from headwater_operator.unitpatterns import COUNT_PATTERN, DURATION_PATTERN, SIZE_PATTERN
from support.fakekube import ApiError, FakeKubeThread
from tests.control import test_units

CRDS = Path(__file__).resolve().parents[2] / "crds"
Parser = Callable[[Any], int]
UNITS: dict[str, tuple[str, Parser]] = {
    "duration": (DURATION_PATTERN, parse_duration),
    "size": (SIZE_PATTERN, parse_size),
    "count": (COUNT_PATTERN, parse_count),
}


def _model_accepts(parse: Parser, text: str) -> bool:
    """What the models accept: the parser, after the models' reading of ``""`` as unset."""
    if text == "":
        return True
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _matches(pattern: str, text: str) -> bool:
    # jsonschema (and so the fake API server) uses re.search, as the API server does with RE2.
    return re.search(pattern, text) is not None


def _examples(test: Callable[..., None]) -> list[Any]:
    """The first parameter of each case of a parametrized units test."""
    (mark,) = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    return [case[0] if isinstance(case, tuple) else case for case in mark.args[1]]


def _cases(unit: str, texts: list[Any], *, leave_out: tuple[str, ...] = ()) -> list[Case]:
    return [(unit, text) for text in texts if isinstance(text, str) and text not in leave_out]


Case = tuple[str, str]
ACCEPTED: list[Case] = [
    *_cases(
        "duration",
        [
            *_examples(test_units.test_parse_duration),
            *["", "+0", "1.5h", ".5s", "1.s", "10μs", "1y2w3d4h5m6s7ms8us9ns", "30s\n"],
        ],
    ),
    *_cases(
        "size",
        [
            *_examples(test_units.test_parse_size),
            *["", " 10 GiB ", "1gib", "2Ki", "1.5k", "0", "1EiB", "5b"],
        ],
    ),
    *_cases(
        "count",
        [*_examples(test_units.test_parse_count), "", "1_000_000", " 2 k ", "1.5K", "0"],
    ),
]
REJECTED: list[Case] = [
    # "" is unset to the models; "0.5ns", "1.5B" and "1.5" have the form but are not whole
    # numbers (the parsers' check, beyond a pattern).
    *_cases(
        "duration",
        [
            *_examples(test_units.test_parse_duration_errors),
            *["1 fortnight", "30", "1h 30m", "-1s", " ", "1hour", "1Y", "0x10s"],
        ],
        leave_out=("", "0.5ns"),
    ),
    *_cases(
        "size",
        [
            *_examples(test_units.test_parse_size_errors),
            *["10 gigs", "5i", "5ib", "-2", "1 GiBs", "+5", " ", "10XB"],
        ],
        leave_out=("1.5B",),
    ),
    *_cases(
        "count",
        [*_examples(test_units.test_parse_count_errors), "1M5", "1 million", "-3"],
        leave_out=("1.5",),
    ),
]


def test_the_units_tests_supply_examples() -> None:
    assert {unit for unit, _ in ACCEPTED} == set(UNITS)
    assert ("duration", "1h30m") in ACCEPTED and ("size", "10GiB") in ACCEPTED


@pytest.mark.parametrize(("unit", "text"), ACCEPTED, ids=repr)
def test_every_accepted_example_matches_the_pattern(unit: str, text: str) -> None:
    pattern, parse = UNITS[unit]
    assert _model_accepts(parse, text), f"{unit} {text!r}: the models refuse it"
    assert _matches(pattern, text), f"{unit} {text!r}: the models accept it, the CRD not"


@pytest.mark.parametrize(("unit", "text"), REJECTED, ids=repr)
def test_rejected_examples_fail_the_pattern(unit: str, text: str) -> None:
    pattern, parse = UNITS[unit]
    assert not _model_accepts(parse, text), f"{unit} {text!r}: the models accept it"
    assert not _matches(pattern, text), f"{unit} {text!r}: the CRD accepts what models refuse"


# Strings close to the grammar: digits, unit letters, dots, signs, blanks and underscores.
_ALPHABET = "0123456789.+-_ \tnsuµμmhdwyKkMGgTtPpEeiIbBx"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=10))
def test_whatever_the_models_accept_matches_the_pattern(text: str) -> None:
    for unit, (pattern, parse) in UNITS.items():
        if _model_accepts(parse, text):
            assert _matches(pattern, text), f"{unit} {text!r}"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_the_formatters_output_matches_the_pattern(value: int) -> None:
    assert _matches(DURATION_PATTERN, format_duration(value))
    assert _matches(SIZE_PATTERN, format_size(value))
    assert _matches(COUNT_PATTERN, format_count(value))


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_every_unit_field_of_every_crd_has_its_pattern() -> None:
    """Every int-or-string node in crds/ is a unit (the models have no other), so each has one
    of the three patterns; a model field with its own description would lose it."""
    seen = set()
    for path in sorted(CRDS.glob("*.yaml")):
        for node in _walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if node.get("x-kubernetes-int-or-string"):
                assert node.get("pattern") in (DURATION_PATTERN, SIZE_PATTERN, COUNT_PATTERN), (
                    f"{path.name}: {node}"
                )
                seen.add(node["pattern"])
    assert seen == {DURATION_PATTERN, SIZE_PATTERN, COUNT_PATTERN}


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKubeThread]:
    with FakeKubeThread(sorted(CRDS.glob("*.yaml"))) as kube:
        yield kube


STREAM: dict[str, Any] = {
    "apiVersion": "headwater.io/v1",
    "kind": "Stream",
    "metadata": {"name": "units", "namespace": "default"},
    "spec": {"name": "UNITS", "subjects": ["UNITS.*"]},
}


def _stream(name: str, **spec: Any) -> dict[str, Any]:
    document = copy.deepcopy(STREAM)
    document["metadata"]["name"] = name
    document["spec"].update(spec)
    return document


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("maxAge", "1 fortnight"),
        ("max_age", "1 fortnight"),
        ("duplicateWindow", "2 minutes"),
        ("maxBytes", "10 gigs"),
        ("maxMsgSize", "1 meg"),
        ("maxMsgs", "lots"),
    ],
)
def test_the_api_server_refuses_a_bad_unit(kube: FakeKubeThread, field: str, value: str) -> None:
    with pytest.raises(ApiError) as failure:
        kube.api.create(_stream("bad-units", **{field: value}))
    assert failure.value.code == 422
    assert f"spec.{field}" in str(failure.value)
    assert kube.api.get("headwater.io/v1", "streams", "bad-units") is None


def test_the_api_server_refuses_a_bad_consumer_backoff(kube: FakeKubeThread) -> None:
    document = {
        "apiVersion": "headwater.io/v1",
        "kind": "Consumer",
        "metadata": {"name": "bad-backoff", "namespace": "default"},
        "spec": {"streamName": "S", "durableName": "D", "backoff": ["1s", "1 fortnight"]},
    }
    with pytest.raises(ApiError) as failure:
        kube.api.create(document)
    assert failure.value.code == 422
    assert "spec.backoff[1]" in str(failure.value)


def test_the_api_server_takes_every_spelling_the_models_take(kube: FakeKubeThread) -> None:
    stored = kube.api.create(
        _stream(
            "good-units",
            maxAge="1y",
            duplicateWindow="1h30m",
            maxBytes="10GiB",
            maxMsgSize="",
            maxMsgs="1_000",
            maxMsgsPerSubject=-1,
        )
    )
    assert stored["spec"]["maxAge"] == "1y"
    assert stored["spec"]["maxBytes"] == "10GiB"


GO_MATCHER = """package main

import (
	"encoding/json"
	"os"
	"regexp"
)

func main() {
	var cases [][2]string
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	out := make([]bool, len(cases))
	for i, c := range cases {
		out[i] = regexp.MustCompile(c[0]).MatchString(c[1])
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
"""


def test_go_regexp_reads_the_patterns_as_python_does(tmp_path: Path) -> None:
    """The API server matches with Go's RE2; the fake one with Python's re."""
    cases = [(UNITS[unit][0], text) for unit, text in ACCEPTED + REJECTED]
    source = tmp_path / "match.go"
    source.write_text(GO_MATCHER, encoding="utf-8")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOCACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        ["go", "run", str(source)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    by_go = json.loads(result.stdout)
    by_python = [_matches(pattern, text) for pattern, text in cases]
    assert by_go == by_python
