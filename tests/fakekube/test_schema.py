"""openAPIV3Schema validation (422 naming the field), structural defaulting and pruning."""

from __future__ import annotations

from typing import Any

import aiohttp

from support.fakekube.schema import ObjectSchema

WIDGETS = "/apis/example.headwater.io/v1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def post(http: aiohttp.ClientSession, spec: Any, name: str = "w1") -> tuple[int, Any]:
    body = {"metadata": {"name": name}, "spec": spec}
    async with http.post(WIDGETS, json=body) as response:
        return response.status, await response.json()


def fields(failure: dict[str, Any]) -> dict[str, str]:
    return {cause["field"]: cause["reason"] for cause in failure["details"]["causes"]}


async def test_a_missing_required_field_is_422_naming_it(http: aiohttp.ClientSession) -> None:
    status, failure = await post(http, {"size": "small"})
    assert status == 422
    assert failure["reason"] == "Invalid" and failure["details"]["kind"] == "Widget"
    assert fields(failure) == {"spec.color": "FieldValueRequired"}
    expected = 'Widget.example.headwater.io "w1" is invalid: spec.color: Required value'
    assert failure["message"] == expected


async def test_enum_type_and_range_violations(http: aiohttp.ClientSession) -> None:
    status, failure = await post(http, {"color": 7, "size": "huge", "replicas": 11})
    assert status == 422
    assert fields(failure) == {
        "spec.color": "FieldValueTypeInvalid",
        "spec.size": "FieldValueNotSupported",
        "spec.replicas": "FieldValueInvalid",
    }
    assert '"huge": supported values: "small", "medium", "large"' in failure["message"]
    status, failure = await post(http, {"color": "Red!"})
    assert status == 422 and fields(failure) == {"spec.color": "FieldValueInvalid"}
    assert "does not match '^[a-z]+$'" in failure["message"]
    status, failure = await post(http, {"color": "red", "labels": {"a": 1}})
    assert status == 422 and fields(failure) == {"spec.labels.a": "FieldValueTypeInvalid"}


async def test_defaults_fill_absent_fields_on_create(http: aiohttp.ClientSession) -> None:
    status, created = await post(http, {"color": "red"})
    assert status == 201
    # Nested defaults apply only inside objects that are present: no "options" here.
    assert created["spec"] == {"color": "red", "size": "medium", "replicas": 1}
    status, created = await post(http, {"color": "red", "options": {}, "size": "large"}, "w2")
    assert created["spec"]["options"] == {"retries": 3} and created["spec"]["size"] == "large"


async def test_defaults_apply_on_update_too(http: aiohttp.ClientSession) -> None:
    await post(http, {"color": "red", "replicas": 4})
    patch = {"spec": {"replicas": None, "options": {}}}
    async with http.patch(f"{WIDGETS}/w1", json=patch, headers=MERGE) as response:
        patched = await response.json()
    assert patched["spec"]["replicas"] == 1 and patched["spec"]["options"] == {"retries": 3}


async def test_unknown_fields_are_pruned_unless_preserved(http: aiohttp.ClientSession) -> None:
    spec = {"color": "red", "bogus": 1, "options": {"retries": 1, "junk": 2}, "extra": {"any": [1]}}
    body = {"metadata": {"name": "w1"}, "spec": spec, "topLevelJunk": True}
    async with http.post(WIDGETS, json=body) as response:
        created = await response.json()
    assert "topLevelJunk" not in created
    assert "bogus" not in created["spec"]
    assert created["spec"]["options"] == {"retries": 1}
    assert created["spec"]["extra"] == {"any": [1]}


async def test_nullable_and_int_or_string(http: aiohttp.ClientSession) -> None:
    status, created = await post(http, {"color": "red", "note": None, "port": "http"})
    assert status == 201 and created["spec"]["note"] is None and created["spec"]["port"] == "http"
    assert (await post(http, {"color": "red", "port": 4222}, "w2"))[0] == 201
    status, failure = await post(http, {"color": "red", "port": 1.5}, "w3")
    assert status == 422 and "spec.port" in fields(failure)
    # null for a non-nullable field is dropped, then defaulted.
    status, created = await post(http, {"color": "red", "size": None}, "w4")
    assert status == 201 and created["spec"]["size"] == "medium"


async def test_an_invalid_update_leaves_the_object_unchanged(http: aiohttp.ClientSession) -> None:
    _, created = await post(http, {"color": "red"})
    async with http.patch(f"{WIDGETS}/w1", json={"spec": {"size": "huge"}}, headers=MERGE) as bad:
        assert bad.status == 422
    async with http.get(f"{WIDGETS}/w1") as response:
        assert await response.json() == created


def test_metadata_is_never_pruned_and_arrays_recurse() -> None:
    schema = ObjectSchema(
        {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"a": {"type": "string", "default": "x"}},
                    },
                },
            },
        }
    )
    obj = {"metadata": {"name": "n", "labels": {"k": "v"}}, "items": [{"b": 1}, {"a": "y"}]}
    assert schema.normalize(obj) == {
        "metadata": {"name": "n", "labels": {"k": "v"}},
        "items": [{"a": "x"}, {"a": "y"}],
    }
    assert schema.validate({"items": [{"a": 1}]}) == [
        (
            "FieldValueTypeInvalid",
            "items[0].a",
            "Invalid value: 1: items[0].a in body must be of type string",
        )
    ]


def test_embedded_resources_keep_their_object_fields() -> None:
    schema = ObjectSchema(
        {
            "type": "object",
            "properties": {
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "spec": {"type": "object", "properties": {"a": {"type": "string"}}}
                    },
                }
            },
        }
    )
    template = {
        "apiVersion": "v1",
        "kind": "X",
        "metadata": {"name": "t"},
        "spec": {"a": "1", "b": 2},
    }
    assert schema.normalize({"template": template, "junk": 1}) == {
        "template": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "t"}, "spec": {"a": "1"}}
    }
