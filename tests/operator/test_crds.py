"""crds/: generated from the models, structural, served by the fake API server for real."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.control.documents import parse_documents
from headwater.control.models import KINDS
from headwater.control.models.common import check_asset_name
from headwater_operator import crdgen
from headwater_operator.crdschema import ASSET_NAME, default_allowed
from headwater_operator.resources import parse_body
from headwater_operator.spellings import all_models, spellings
from support.fakekube import ApiError, FakeKubeThread

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"


def headwater_documents(path: Path) -> list[dict[str, Any]]:
    return [
        document
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict)
        and str(document.get("apiVersion", "")).startswith("headwater.io/")
    ]


EXAMPLES = sorted(
    path
    for path in (REPO / "examples").rglob("*")
    if path.suffix in (".yaml", ".yml") and headwater_documents(path)
)
PLURALS = {names.kind: names.plural for names in crdgen.KIND_NAMES.values()}


def crd_documents() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml"))]


def spec_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for document in crd_documents():
        if document["kind"] != "CustomResourceDefinition":
            continue
        version = document["spec"]["versions"][0]
        kind = document["spec"]["names"]["kind"]
        yield kind, version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_crds_match_the_models() -> None:
    stale = crdgen.differences(CRDS)
    assert stale == [], "crds/ drifted from the models: run python -m headwater_operator.crdgen"


def test_kubectl_apply_f_crds_reads_only_crds() -> None:
    """`kubectl apply -f crds/` reads every .yaml, .yml and .json file there: each must be a
    Kubernetes object (a CRD), so the kustomization is named so that kubectl skips it."""
    read = sorted(p for p in CRDS.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    assert {p.name for p in read} == {n.file_name for n in crdgen.KIND_NAMES.values()}
    for path in read:
        for document in yaml.safe_load_all(path.read_text()):
            assert document["apiVersion"] == "apiextensions.k8s.io/v1", path
            assert document["kind"] == "CustomResourceDefinition", path


def test_crds_is_also_a_kustomization_of_exactly_the_crds() -> None:
    """`kubectl apply -k crds/` works too: kustomize also reads a file named Kustomization."""
    names = ("kustomization.yaml", "kustomization.yml", "Kustomization")
    (found,) = [CRDS / n for n in names if (CRDS / n).exists()]
    body = yaml.safe_load(found.read_text())
    assert body["kind"] == "Kustomization"
    assert sorted(body["resources"]) == sorted(n.file_name for n in crdgen.KIND_NAMES.values())


def test_check_mode_reports_a_stray_manifest(tmp_path: Path) -> None:
    crdgen.write(tmp_path)
    stray = tmp_path / "kustomization.yaml"
    stray.write_text("kind: Kustomization\n")
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1
    assert crdgen.differences(tmp_path) == [str(stray)]
    (tmp_path / "notes.md").write_text("not read by kubectl")
    stray.unlink()
    assert crdgen.differences(tmp_path) == []


def test_check_mode_reports_a_drifted_file(tmp_path: Path) -> None:
    crdgen.write(tmp_path)
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 0
    path = tmp_path / "stream.yaml"
    path.write_text(path.read_text().replace("default: file", "default: memory"))
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1
    assert crdgen.differences(tmp_path) == [str(path)]


def test_every_kind_has_a_crd_with_status_columns_and_short_names() -> None:
    documents = {d["spec"]["names"]["kind"]: d for d in crd_documents() if "spec" in d}
    assert set(documents) == set(KINDS)
    for kind, document in documents.items():
        spec = document["spec"]
        assert spec["group"] == "headwater.io"
        assert document["metadata"]["name"] == f"{spec['names']['plural']}.headwater.io"
        assert spec["names"]["shortNames"]
        (version,) = spec["versions"]
        assert version["name"] == "v1" and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert columns[0] == "Ready" and columns[-1] == "Age", kind
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert {"observedGeneration", "conditions", "drift"} <= set(status["properties"])


def test_spec_schemas_are_structural() -> None:
    for kind, schema in spec_schemas():
        for path, node in walk(schema):
            typed = "type" in node or node.get("x-kubernetes-int-or-string")
            assert typed, f"{kind}{path}: no type"
            for banned in ("$ref", "$defs", "title", "const"):
                assert banned not in node, f"{kind}{path}: {banned}"
            assert node.get("additionalProperties") is not False, f"{kind}{path}"
            if "properties" in node:
                assert "additionalProperties" not in node, f"{kind}{path}"
            for rule in node.get("anyOf", []) + node.get("allOf", []):
                assert "type" not in rule and "properties" not in rule, f"{kind}{path}"


def test_properties_and_requirements_use_names_users_write() -> None:
    """Python's spellings of keywords (the model's ``from_``) are not offered to users, and
    every required name is a property."""
    for kind, schema in spec_schemas():
        for path, node in walk(schema):
            properties = node.get("properties") or {}
            assert not [n for n in properties if n.endswith("_")], f"{kind}{path}"
            for name in node.get("required", []):
                assert name in properties, f"{kind}{path}: {name}"


def test_defaults_sit_on_one_spelling_and_equal_the_models() -> None:
    for kind, schema in spec_schemas():
        for name, model in all_models(KINDS[kind]).items():
            for field, names in spellings(model).items():
                default = model.model_fields[field].default
                for node_path, node in walk(schema):
                    properties = node.get("properties") or {}
                    if not set(names) <= set(properties):
                        continue
                    stated = {
                        n: properties[n]["default"] for n in names if "default" in properties[n]
                    }
                    where = f"{kind}{node_path} {name}.{field}"
                    if default_allowed(default):
                        assert stated == {names[0]: default}, where
                    else:
                        assert stated == {}, where


def test_asset_name_pattern_agrees_with_the_model() -> None:
    pattern = re.compile(ASSET_NAME["pattern"])
    samples = [
        "ORDERS",
        "a-b_c",
        "x" * 255,
        "x" * 256,
        "",
        "a.b",
        "a*",
        "a>",
        "a b",
        "a/b",
        "a\\b",
        "a\tb",
        "KV_x",
        "ünïcode",
    ]
    for sample in samples:
        try:
            check_asset_name(sample)
            valid = True
        except ValueError:
            valid = False
        by_schema = bool(pattern.match(sample)) and 1 <= len(sample) <= ASSET_NAME["maxLength"]
        assert by_schema == valid, sample


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKubeThread]:
    """One API server for the module: every test uses names of its own (or is refused)."""
    with FakeKubeThread(sorted(CRDS.glob("*.yaml"))) as kube:
        yield kube


def submit(
    kube: FakeKubeThread, document: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    document = copy.deepcopy(document)
    document["metadata"]["namespace"] = namespace
    return kube.api.create(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "examples")))
def test_examples_pass_the_schema_and_parse_the_same(kube: FakeKubeThread, path: Path) -> None:
    # A namespace per file: several example sets reuse the same object names.
    namespace = "ex-" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    kube.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for document in headwater_documents(path):
        stored = submit(kube, document, namespace)
        # What the operator reads back (defaults filled) is the resource the CLI reads.
        (direct,), errors = parse_documents(yaml.safe_dump(document))
        assert errors == []
        parsed = parse_body(stored)
        assert parsed.errors == []
        assert parsed.resource is not None
        assert parsed.resource.spec == direct.spec


def test_snake_case_manifest_survives_crd_defaults(kube: FakeKubeThread) -> None:
    document = {
        "apiVersion": "headwater.io/v1",
        "kind": "Stream",
        "metadata": {"name": "snake"},
        "spec": {
            "name": "SNAKE",
            "max_age": "1h",
            "num_replicas": 1,
            "allow_rollup_hdrs": True,
            "consumer_limits": {"max_ack_pending": 5},
        },
    }
    stored = submit(kube, document)
    assert stored["spec"]["maxAge"] == 0  # the CRD default under the camelCase spelling
    parsed = parse_body(stored)
    assert parsed.errors == [], parsed.message
    assert parsed.resource is not None
    spec = parsed.resource.spec
    assert spec.max_age == 3_600_000_000_000  # type: ignore[attr-defined]
    assert spec.allow_rollup_hdrs is True  # type: ignore[attr-defined]
    assert spec.consumer_limits.max_ack_pending == 5  # type: ignore[attr-defined]


BROKEN = [
    ("Stream", {"storage": "disk"}, "spec.storage"),
    ("Stream", {"name": "a.b"}, "spec.name"),
    ("Stream", {"retention": "forever"}, "spec.retention"),
    ("Stream", {"replicas": 9}, "spec.replicas"),
    ("Stream", {"maxConsumers": -2}, "spec.maxConsumers"),
    ("Stream", {"subjects": "ORDERS.*"}, "spec.subjects"),
    # Either spelling of a required field satisfies an anyOf; its message names only spec.
    ("Consumer", {"durableName": "X"}, "spec: Invalid value"),
    ("Consumer", {"streamName": "S", "deliverPolicy": "sometimes"}, "spec.deliverPolicy"),
    ("Consumer", {"streamName": "S", "maxDeliver": -5}, "spec.maxDeliver"),
    ("KeyValue", {"bucket": "a b"}, "spec.bucket"),
    ("KeyValue", {"history": 65}, "spec.history"),
    ("KeyValue", {"storage": "disk"}, "spec.storage"),
    ("StreamTemplate", {"config": {"subjects": ["x.*"]}}, "spec: Invalid value"),
]


@pytest.mark.parametrize(
    ("kind", "spec", "field"), BROKEN, ids=[f"{k}-{i}" for i, (k, _, _f) in enumerate(BROKEN)]
)
def test_broken_specs_are_rejected(
    kube: FakeKubeThread, kind: str, spec: dict[str, Any], field: str
) -> None:
    document = {
        "apiVersion": "headwater.io/v1",
        "kind": kind,
        "metadata": {"name": "broken"},
        "spec": spec,
    }
    with pytest.raises(ApiError) as failure:
        submit(kube, document)
    assert failure.value.code == 422
    assert field in str(failure.value)
    assert kube.api.get("headwater.io/v1", PLURALS[kind], "broken") is None


def _columns(kind: str) -> dict[str, dict[str, Any]]:
    (document,) = [
        d for d in crd_documents() if d.get("spec", {}).get("names", {}).get("kind") == kind
    ]
    (version,) = document["spec"]["versions"]
    return {column["name"]: column for column in version["additionalPrinterColumns"]}


def test_printer_columns_show_what_kubectl_get_needs() -> None:
    """NACK shows a stream's subjects and a consumer's stream and ack policy; ours add the
    conditions and the server's figures, and read spelling-dependent values from status (which
    the operator writes from the server), not from one spelling of the spec."""
    stream = _columns("Stream")
    assert list(stream)[:2] == ["Ready", "InSync"] and list(stream)[-1] == "Age"
    assert {"Subjects", "Storage", "Replicas", "Messages"} <= set(stream)
    assert stream["Storage"]["jsonPath"] == ".status.storage"
    assert stream["Replicas"]["jsonPath"] == ".status.replicas"
    consumer = _columns("Consumer")
    # One column for both filterSubject and filterSubjects, named for what it shows.
    assert "Subjects" not in consumer
    assert consumer["Filter"]["jsonPath"] == ".status.filterSubjects"
    assert consumer["AckPolicy"]["jsonPath"] == ".status.ackPolicy"
    for kind in ("KeyValue", "ObjectStore"):
        assert {"Bucket", "Storage"} <= set(_columns(kind)), kind


def test_printer_columns_name_declared_fields() -> None:
    for document in crd_documents():
        if "spec" not in document:
            continue
        (version,) = document["spec"]["versions"]
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        for column in version["additionalPrinterColumns"]:
            match = re.fullmatch(r"\.(spec|status)\.(\w+)(\[.*\])?(\.\w+)?", column["jsonPath"])
            if match is None:
                assert column["jsonPath"] == ".metadata.creationTimestamp", column
                continue
            part, field = match.group(1), match.group(2)
            assert field in schema[part]["properties"], (document["metadata"]["name"], column)
