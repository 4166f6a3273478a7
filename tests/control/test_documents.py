"""Documents: YAML files and directories, names, and errors naming file, resource, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.control.documents import (
    DocumentErrors,
    load_documents,
    parse_documents,
)
from headwater.control.models import Consumer, KeyValue, Stream


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def errors_of(tmp_path: Path, text: str) -> list[str]:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(DocumentErrors) as failure:
        load_documents([path])
    return [str(error) for error in failure.value.errors]


STREAM = "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: orders}\n"


def test_multi_document_file_and_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "all.yaml",
        STREAM
        + "spec: {name: ORDERS}\n---\n"
        + "apiVersion: headwater.io/v1\nkind: Consumer\nmetadata: {name: new}\n"
        + "spec: {streamName: ORDERS}\n---\n"
        + "apiVersion: headwater.io/v1\nkind: KeyValue\nmetadata: {name: config}\nspec: {}\n",
    )
    resources = load_documents([path])
    specs = [r.spec for r in resources]
    assert isinstance(specs[0], Stream) and specs[0].name == "ORDERS"
    # No durable name in the spec: metadata.name is the server name.
    assert isinstance(specs[1], Consumer) and specs[1].server_name == "new"
    assert isinstance(specs[2], KeyValue) and specs[2].bucket == "config"
    assert [r.index for r in resources] == [0, 1, 2]


def test_directory_is_read_recursively(tmp_path: Path) -> None:
    write(tmp_path, "a/one.yaml", STREAM + "spec: {name: ONE}\n")
    write(tmp_path, "a/b/two.yml", STREAM.replace("orders", "two") + "spec: {name: TWO}\n")
    write(tmp_path, "a/readme.txt", "not yaml: [")
    names = sorted(r.key.name for r in load_documents([tmp_path / "a"]))
    assert names == ["ONE", "TWO"]


def test_allow_replace_annotation() -> None:
    text = (
        "apiVersion: headwater.io/v1\nkind: Stream\nmetadata:\n  name: s\n  annotations:\n"
        '    headwater.io/allow-replace: "true"\nspec: {name: S}\n'
    )
    (resource,), errors = parse_documents(text)
    assert errors == [] and resource.allow_replace


def test_error_names_file_resource_and_field(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, STREAM + "spec:\n  name: ORDERS\n  maxAge: soon\n")
    assert errors == [
        f"{tmp_path / 'bad.yaml'}: Stream/ORDERS: spec.maxAge: invalid duration 'soon'; "
        "expected e.g. '1h30m', '500ms', '90d', '1y' (units ns, us, ms, s, m, h, d, w, y)"
    ]


def test_every_error_is_reported(tmp_path: Path) -> None:
    text = (
        STREAM
        + "spec: {name: A, storage: disk, bogus: 1}\n---\n"
        + "apiVersion: headwater.io/v1\nkind: Consumer\nmetadata: {name: c}\n"
        + "spec: {streamName: A, durableName: C, filterSubject: x, filterSubjects: [y]}\n"
    )
    errors = errors_of(tmp_path, text)
    assert len(errors) == 3
    assert "Stream/A: spec.storage:" in errors[0]
    assert "Stream/A: spec.bogus: Extra inputs are not permitted" in errors[1]
    assert "(document 2): Consumer/A/C: spec: filter_subject and filter_subjects" in errors[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: jetstream.nats.io/v1beta2\nkind: Stream\nmetadata: {name: s}\nspec: {}\n",
            "Stream/s: apiVersion: apiVersion must be headwater.io/v1 (a NACK manifest: change "
            "apiVersion to headwater.io/v1)",
        ),
        (
            "apiVersion: headwater.io/v1\nkind: Queue\nmetadata: {name: s}\nspec: {}\n",
            "Queue/s: kind: kind must be one of Stream, Consumer",
        ),
        (
            "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: Orders}\nspec: {}\n",
            "metadata.name: metadata.name is required and must be a lowercase Kubernetes name",
        ),
        (
            "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: o}\nspec: {}\nextra: 1\n",
            "unknown top-level field(s): extra",
        ),
        (
            STREAM + "spec: {name: S, metadata: {headwater.io/managed-by: me}}\n",
            "Stream/S: spec.metadata.headwater.io/managed-by: metadata keys headwater.io/*",
        ),
        (
            # A GitHub workflow beside the resources: YAML 1.1 reads ``on:`` as True, which
            # once made the report crash while sorting the keys.
            "name: CI\non:\n  push: {}\njobs: {}\n",
            "not a Headwater document: unknown top-level field(s): jobs, name, on",
        ),
        ("apiVersion: [", "invalid YAML at line"),
        ("- a\n- b\n", "a document must be a mapping"),
    ],
)
def test_document_level_errors(tmp_path: Path, text: str, expected: str) -> None:
    (error,) = errors_of(tmp_path, text)
    assert expected in error


def test_duplicates_are_errors(tmp_path: Path) -> None:
    first = write(tmp_path, "one.yaml", STREAM + "spec: {name: ORDERS}\n")
    second = write(tmp_path, "two.yaml", STREAM + "spec: {name: ORDERS, maxAge: 1h}\n")
    with pytest.raises(DocumentErrors) as failure:
        load_documents([first, second])
    (error,) = failure.value.errors
    assert str(error) == f"{second}: Stream/ORDERS: duplicate resource: also defined in {first}"


def test_nack_manifest_ports_by_changing_api_version(tmp_path: Path) -> None:
    """A NACK v1beta2 manifest, connection fields and all, loads once apiVersion changes."""
    nack = """
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders
spec:
  name: orders
  subjects: ["orders.*"]
  storage: memory
  maxAge: 1h0m0s
  replicas: 1
  duplicateWindow: 2m
  compression: ""
  allowRollup: true
  denyDelete: false
  preventDelete: true
  account: team-a
---
apiVersion: jetstream.nats.io/v1beta2
kind: Consumer
metadata:
  name: my-push-consumer
spec:
  streamName: orders
  durableName: my-push-consumer
  deliverSubject: my-push-consumer.orders
  deliverPolicy: last
  ackPolicy: none
  replayPolicy: instant
  heartbeatInterval: 5s
  maxAckPending: 0
  preventUpdate: false
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata:
  name: kv
spec:
  bucket: my-kv
  history: 20
  storage: file
  maxValueSize: 1024
  compression: true
"""
    path = write(
        tmp_path, "nack.yaml", nack.replace("jetstream.nats.io/v1beta2", "headwater.io/v1")
    )
    stream, consumer, kv = (r.spec for r in load_documents([path]))
    assert isinstance(stream, Stream) and stream.max_age == 3600 * 10**9
    assert stream.prevent_delete and stream.allow_rollup_hdrs and stream.account == "team-a"
    assert isinstance(consumer, Consumer) and consumer.idle_heartbeat == 5 * 10**9
    assert isinstance(kv, KeyValue) and kv.history == 20 and kv.compression
