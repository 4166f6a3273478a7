"""Load YAML documents (files, or directories of them) into validated resources.

A document has the shape of a Kubernetes custom resource, so one file serves ``kubectl apply``
and the CLI::

    apiVersion: headwater.io/v1
    kind: Stream            # Consumer, KeyValue, ObjectStore, StreamTemplate
    metadata:
      name: orders          # Kubernetes naming; the server name when spec gives none
      annotations:
        headwater.io/allow-replace: "true"
    spec: {...}             # server JSON names or NACK's camelCase

Every error names the file, the resource (kind/name) and the field path, and loading collects
all of them rather than stopping at the first, so one run shows everything to fix.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from headwater.control.models import ADOPT_ANNOTATION, KINDS, Consumer, ResourceKey, ResourceSpec
from headwater.control.models.base import SERVER_METADATA_PREFIX

API_VERSION = "headwater.io/v1"
ALLOW_REPLACE_ANNOTATION = "headwater.io/allow-replace"
RESERVED_METADATA_PREFIX = "headwater.io/"
NACK_API_GROUP = "jetstream.nats.io/"
_TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NAME_FIELDS = {
    "Stream": ("name",),
    "KeyValue": ("bucket", "name"),
    "ObjectStore": ("bucket", "name"),
    "StreamTemplate": ("name",),
    "Consumer": ("durable_name", "durableName", "name"),
}
_NAME_TARGET = {
    "Stream": "name",
    "KeyValue": "bucket",
    "ObjectStore": "bucket",
    "StreamTemplate": "name",
    "Consumer": "durable_name",
}


@dataclass(frozen=True)
class DocumentError:
    """One problem: where (file, document index), which resource, which field, what."""

    file: str
    message: str
    resource: str = ""
    field: str = ""
    index: int = 0
    line: int = 0
    """1-based line of the field (or of the document) in the file; 0 when unknown."""

    def __str__(self) -> str:
        where = f"{self.file}" + (f" (document {self.index + 1})" if self.index else "")
        parts = [where]
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        return ": ".join(parts) + f": {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "document": self.index + 1,
            "resource": self.resource,
            "field": self.field,
            "message": self.message,
            "line": self.line,
        }


class DocumentErrors(Exception):
    """Raised when any document is invalid; ``errors`` holds every problem found."""

    def __init__(self, errors: Sequence[DocumentError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class Resource:
    """A validated document: the spec plus where it came from and its annotations."""

    spec: ResourceSpec
    file: str
    index: int = 0
    metadata_name: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> ResourceKey:
        return self.spec.key

    @property
    def kind(self) -> str:
        return self.spec.KIND

    @property
    def allow_replace(self) -> bool:
        return str(self.annotations.get(ALLOW_REPLACE_ANNOTATION, "")).lower() == "true"

    @property
    def adopt(self) -> bool:
        return str(self.annotations.get(ADOPT_ANNOTATION, "")).lower() == "true"


def document_files(paths: Iterable[str | Path]) -> list[Path]:
    """The YAML files named, directories expanded (recursively, sorted)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")
            )
            files.extend(found)
        else:
            files.append(path)
    return files


def load_documents(paths: Iterable[str | Path]) -> list[Resource]:
    """Every resource in ``paths``; raises DocumentErrors listing every problem."""
    resources: list[Resource] = []
    errors: list[DocumentError] = []
    files = document_files(paths)
    if not files:
        raise DocumentErrors([DocumentError(file="-", message="no YAML documents found")])
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            errors.append(DocumentError(file=str(path), message=f"can not read: {error}"))
            continue
        loaded, problems = parse_documents(text, str(path))
        resources.extend(loaded)
        errors.extend(problems)
    errors.extend(_duplicates(resources))
    if errors:
        raise DocumentErrors(errors)
    return resources


def parse_documents(
    text: str, file: str = "<string>"
) -> tuple[list[Resource], list[DocumentError]]:
    """Resources and errors of one multi-document YAML text."""
    try:
        nodes, documents = _load_all(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        line = mark.line + 1 if mark is not None else 0
        message = f"invalid YAML{where}: {error}"
        return [], [DocumentError(file=file, message=message, line=line)]
    resources: list[Resource] = []
    errors: list[DocumentError] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        resource, problems = parse_document(document, file, index)
        node = nodes[index] if index < len(nodes) else None
        errors.extend(dataclasses.replace(p, line=line_of(node, p.field)) for p in problems)
        if resource is not None:
            resources.append(resource)
    return resources, errors


def _load_all(text: str) -> tuple[list[yaml.Node], list[Any]]:
    """Each document's node (where its fields are, for error lines) and its value, from one
    parse: ``safe_load_all`` is this loop, keeping only the values."""
    loader = yaml.SafeLoader(text)
    nodes: list[yaml.Node] = []
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            nodes.append(node)
            documents.append(loader.construct_document(node))
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
    return nodes, documents


def line_of(node: yaml.Node | None, path: str) -> int:
    """The 1-based line of the dotted field ``path`` (``spec.maxAge``, ``spec.subjects.0``) in
    a composed document, or of the deepest part of it found (0 without a node). Keys may hold
    dots themselves (``headwater.io/allow-replace``), so the longest key that matches wins."""
    if node is None:
        return 0
    parts = path.split(".") if path else []
    while parts:
        child = None
        if isinstance(node, yaml.MappingNode):
            for width in range(len(parts), 0, -1):
                name = ".".join(parts[:width])
                child = next((v for k, v in node.value if k.value == name), None)
                if child is not None:
                    parts = parts[width:]
                    break
        elif isinstance(node, yaml.SequenceNode) and parts[0].isdigit():
            position = int(parts[0])
            if position < len(node.value):
                child = node.value[position]
                parts = parts[1:]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1


def _key_text(key: object) -> str:
    """A mapping key as the user most likely wrote it (``on:`` comes back as True)."""
    if isinstance(key, bool):
        return "on" if key else "off"
    return str(key)


def parse_document(
    document: Any, file: str, index: int = 0
) -> tuple[Resource | None, list[DocumentError]]:
    """One document (already parsed YAML/JSON) as a Resource, or its errors."""

    def error(message: str, resource: str = "", field: str = "") -> list[DocumentError]:
        return [DocumentError(file, message, resource, field, index)]

    if not isinstance(document, Mapping):
        return None, error("a document must be a mapping with apiVersion, kind, metadata, spec")
    # YAML 1.1 reads a bare ``on:`` (a GitHub workflow's) as the boolean True: keys may be
    # of any type, so they are compared as text.
    unknown = sorted(_key_text(key) for key in set(document) - _TOP_LEVEL)
    if unknown:
        what = "" if "kind" in document else "not a Headwater document: "
        return None, error(f"{what}unknown top-level field(s): {', '.join(unknown)}")
    api_version = document.get("apiVersion")
    kind = document.get("kind")
    metadata = document.get("metadata") or {}
    label = f"{kind}/{metadata.get('name', '?')}" if isinstance(metadata, Mapping) else str(kind)
    if api_version != API_VERSION:
        hint = ""
        if isinstance(api_version, str) and api_version.startswith(NACK_API_GROUP):
            hint = f" (a NACK manifest: change apiVersion to {API_VERSION})"
        return None, error(f"apiVersion must be {API_VERSION}{hint}", label, "apiVersion")
    if kind not in KINDS:
        return None, error(f"kind must be one of {', '.join(KINDS)}", label, "kind")
    if not isinstance(metadata, Mapping):
        return None, error("metadata must be a mapping", label, "metadata")
    metadata_name = metadata.get("name")
    if not isinstance(metadata_name, str) or not _K8S_NAME.match(metadata_name):
        return None, error(
            "metadata.name is required and must be a lowercase Kubernetes name "
            "(a-z, 0-9, '-', '.')",
            label,
            "metadata.name",
        )
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        return None, error("metadata.annotations must be a mapping", label, "metadata")
    spec = document.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return None, error("spec must be a mapping", label, "spec")
    spec = dict(spec)
    if not any(spec.get(name) for name in _NAME_FIELDS[kind]):
        spec[_NAME_TARGET[kind]] = metadata_name
    label = f"{kind}/{_display_name(kind, spec, metadata_name)}"
    problems = _reserved_metadata(spec, kind)
    if problems:
        return None, [DocumentError(file, text, label, path, index) for path, text in problems]
    model = KINDS[kind]
    try:
        parsed = model.model_validate(spec)
    except ValidationError as failure:
        return None, [
            DocumentError(file, message, label, path, index)
            for path, message in validation_messages(failure, spec)
        ]
    resource = Resource(
        spec=parsed,
        file=file,
        index=index,
        metadata_name=metadata_name,
        annotations={str(k): str(v) for k, v in annotations.items()},
    )
    return resource, []


def _display_name(kind: str, spec: Mapping[str, Any], fallback: str) -> str:
    for name in _NAME_FIELDS[kind]:
        if spec.get(name):
            value = str(spec[name])
            if kind == "Consumer":
                stream = spec.get("stream_name") or spec.get("streamName")
                return f"{stream}/{value}" if stream else value
            return value
    return fallback


def _reserved_metadata(spec: Mapping[str, Any], kind: str) -> list[tuple[str, str]]:
    metadata = spec.get("metadata")
    if kind == "StreamTemplate":
        config = spec.get("config")
        metadata = config.get("metadata") if isinstance(config, Mapping) else None
    if not isinstance(metadata, Mapping):
        return []
    problems = []
    for key in metadata:
        if str(key).startswith((RESERVED_METADATA_PREFIX, SERVER_METADATA_PREFIX)):
            problems.append(
                (
                    f"spec.metadata.{key}",
                    f"metadata keys {RESERVED_METADATA_PREFIX}* and {SERVER_METADATA_PREFIX}* "
                    "are reserved (set by Headwater and the server)",
                )
            )
    return problems


def validation_messages(failure: ValidationError, spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field path, message) per pydantic error, the path spelled as the document spells it."""
    out: list[tuple[str, str]] = []
    for item in failure.errors():
        loc = [str(part) for part in item["loc"]]
        if loc:
            loc[0] = _spelled(spec, loc[0])
        path = ".".join(["spec", *loc])
        message = item["msg"].removeprefix("Value error, ")
        out.append((path, message))
    return out


def _spelled(spec: Mapping[str, Any], canonical: str) -> str:
    """The key the document used for a canonical field name (``maxAge`` for ``max_age``)."""
    if canonical in spec:
        return canonical
    for key in spec:
        if (
            isinstance(key, str)
            and key.replace("_", "").lower() == canonical.replace("_", "").lower()
        ):
            return key
    return canonical


def _duplicates(resources: Sequence[Resource]) -> list[DocumentError]:
    seen: dict[ResourceKey, Resource] = {}
    errors: list[DocumentError] = []
    for resource in resources:
        first = seen.get(resource.key)
        if first is not None:
            errors.append(
                DocumentError(
                    resource.file,
                    f"duplicate resource: also defined in {first.file}"
                    + (f" (document {first.index + 1})" if first.index else ""),
                    str(resource.key),
                    "",
                    resource.index,
                )
            )
        else:
            seen[resource.key] = resource
    return errors


def consumers_of(resources: Iterable[Resource], stream: str) -> list[Resource]:
    return [r for r in resources if isinstance(r.spec, Consumer) and r.spec.stream_name == stream]
