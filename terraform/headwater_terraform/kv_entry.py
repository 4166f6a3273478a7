"""``headwater_kv_entry``: one key of a KV bucket, written through nats-py's KV API.

KV entries are data, not configuration, so the control-plane core has no kind for them; this
resource talks to the bucket directly, through ``api.jetstream(nc)`` so that a provider with
``js_domain`` reaches the bucket in that domain. Changing ``bucket`` or ``key`` writes a new
entry and deletes the old one (a replacement that loses nothing the configuration does not
name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import (
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue
from tf import schema, types
from tf.types import Unknown
from tf.utils import Diagnostics

from headwater.control import api
from headwater_terraform.assets import SCHEMA_VERSION, Failed, State, has_unknown
from headwater_terraform.errors import server_error

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-/_=.")
ID_HELP = "`BUCKET/KEY`, e.g. `config/feature.flag` (the key may contain `/`)."


def check_key(key: str) -> str | None:
    """Why ``key`` is not a valid KV key (ADR-8), or None."""
    if not key:
        return "the key must not be empty"
    bad = sorted(set(key) - _KEY_CHARS)
    if bad:
        return f"the key must not contain {''.join(bad)!r} (allowed: a-z A-Z 0-9 - / _ = .)"
    if key.startswith(".") or key.endswith("."):
        return "the key must not start or end with '.'"
    return None


async def open_bucket(nc: Client, bucket: str) -> KeyValue:
    """The bucket through the connection's JetStream domain (``api.jetstream``).

    nats-py reports a lookup nobody answered (JetStream off, or a ``js_domain`` the server
    does not serve) as a bare ``ServiceUnavailableError``; this says which subject went
    unanswered, as the core's API requests do."""
    try:
        return await api.jetstream(nc).key_value(bucket)
    except (ServiceUnavailableError, NatsTimeoutError) as error:
        if isinstance(error, ServiceUnavailableError) and error.code is not None:
            raise  # the server answered 503 itself: its description says why
        subject = f"{api.prefix_of(nc)}.STREAM.INFO.KV_{bucket}"
        raise api.ApiUnavailable(f"no reply on {subject}: is JetStream enabled?") from error


async def read_entry(nc: Client, bucket: str, key: str) -> tuple[str, int] | None:
    """The current value and revision, or None when the key (or bucket) does not exist."""
    try:
        kv = await open_bucket(nc, bucket)
        entry = await kv.get(key)
    except (BucketNotFoundError, KeyNotFoundError, KeyDeletedError, NotFoundError):
        return None
    return (entry.value or b"").decode(), int(entry.revision or 0)


class KvEntryResource:
    def __init__(self, provider: Any) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "kv_entry"

    @classmethod
    def type_name(cls) -> str:
        return "headwater_kv_entry"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        return schema.Schema(
            version=SCHEMA_VERSION,
            attributes=[
                schema.Attribute("id", types.String(), computed=True, description=ID_HELP),
                schema.Attribute("bucket", types.String(), required=True, requires_replace=True),
                schema.Attribute("key", types.String(), required=True, requires_replace=True),
                schema.Attribute("value", types.String(), required=True),
                schema.Attribute(
                    "revision",
                    types.Number(),
                    computed=True,
                    description="The entry's revision (its sequence in the bucket's stream).",
                ),
            ],
        )

    def run(self, diags: Diagnostics, action: str, body: Any) -> Any:
        try:
            return self.provider.run(body)
        except Exception as error:  # every failure becomes a diagnostic
            server_error(diags, action, error)
            raise Failed from error

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        key = config.get("key")
        if isinstance(key, str):
            problem = check_key(key)
            if problem:
                diags.add_error("Invalid key", problem, path=["key"])

    def plan(
        self, diags: Diagnostics, prior: State | None, config: State
    ) -> tuple[State | None, list[str]]:
        planned = {name: config.get(name) for name in ("bucket", "key", "value")}
        known = not has_unknown(planned)
        planned["id"] = f"{planned['bucket']}/{planned['key']}" if known else Unknown
        if prior is None:
            planned["revision"] = Unknown
            return planned, []
        forcing = [name for name in ("bucket", "key") if prior.get(name) != config.get(name)]
        same = not forcing and prior.get("value") == config.get("value")
        planned["revision"] = prior.get("revision") if same else Unknown
        return planned, forcing

    def _put(self, diags: Diagnostics, planned: State) -> State | None:
        bucket, key, value = planned["bucket"], planned["key"], planned["value"]

        async def body(nc: Client) -> int:
            kv = await open_bucket(nc, bucket)
            return int(await kv.put(key, value.encode()))

        try:
            revision = self.run(diags, f"Writing {bucket}/{key}", body)
        except Failed:
            return None
        return {**planned, "id": f"{bucket}/{key}", "revision": revision}

    def create(self, diags: Diagnostics, planned: State, config: State) -> State | None:
        return self._put(diags, planned)

    def update(
        self, diags: Diagnostics, prior: State, planned: State, config: State
    ) -> State | None:
        return self._put(diags, planned) or prior

    def delete(self, diags: Diagnostics, prior: State) -> None:
        bucket, key = prior["bucket"], prior["key"]

        async def body(nc: Client) -> None:
            try:
                kv = await open_bucket(nc, bucket)
            except BucketNotFoundError:
                return  # the bucket went first: the entry is gone with it
            await kv.delete(key)

        try:
            self.run(diags, f"Deleting {bucket}/{key}", body)
        except Failed:
            return

    def read(self, diags: Diagnostics, prior: State) -> State | None:
        bucket, key = prior["bucket"], prior["key"]

        async def body(nc: Client) -> tuple[str, int] | None:
            return await read_entry(nc, bucket, key)

        try:
            found = self.run(diags, f"Reading {bucket}/{key}", body)
        except Failed:
            return prior
        if found is None:
            return None
        value, revision = found
        return {**prior, "id": f"{bucket}/{key}", "value": value, "revision": revision}

    def import_(self, diags: Diagnostics, import_id: str) -> State | None:
        bucket, _, key = import_id.partition("/")
        if not bucket or not key:
            diags.add_error(f"Invalid import ID {import_id!r}", f"Expected {ID_HELP}")
            return None
        state = self.read(diags, {"bucket": bucket, "key": key, "value": None, "revision": None})
        if state is None and not diags.has_errors():
            diags.add_error(f"Cannot import {import_id}", f"Bucket {bucket} has no key {key}.")
        return state

    def upgrade(self, diags: Diagnostics, version: int, old: State) -> State:
        names = [a.name for a in self.get_schema().attributes]
        return {name: old.get(name) for name in names}


def entry_state(values: Mapping[str, Any]) -> State:
    return {name: values.get(name) for name in ("id", "bucket", "key", "value", "revision")}
