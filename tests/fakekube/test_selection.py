"""Label and field selector parsing (the query parameters of LIST and WATCH)."""

from __future__ import annotations

from typing import Any

import pytest

from support.fakekube import ApiError
from support.fakekube.selection import field_selector, label_selector


def obj(name: str = "x", namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("app in (web, db),tier notin (x)", {"app": "db", "tier": "y"}, True),
        ("app in (web, db), tier notin (x)", {"app": "db", "tier": "x"}, False),
        ("example.com/part-of=headwater", {"example.com/part-of": "headwater"}, True),
        ("", {}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert label_selector(selector)(obj(**labels)) is expected


@pytest.mark.parametrize("broken", ["app in (web", "=web", "a=b=c"])
def test_broken_label_selectors_are_400(broken: str) -> None:
    with pytest.raises(ApiError) as failure:
        label_selector(broken)
    assert failure.value.code == 400


def test_field_selector() -> None:
    select = field_selector("metadata.name=a,metadata.namespace!=kube-system")
    assert select(obj("a")) is True
    assert select(obj("b")) is False
    assert select(obj("a", "kube-system")) is False
    with pytest.raises(ApiError):
        field_selector("status.phase=Running")
